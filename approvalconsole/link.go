package approvalconsole

import (
	"io/fs"
	"net/http"
	"net/url"
	"strings"
)

// Link returns the function that gives the address of one approval in a
// console mounted at base (the console's address as a person's browser
// reaches it, "https://ops.example.com/console"): base + "/approvals/" +
// the id. It is what middleware.WithApprovalURL takes, so that envelopes
// asking for a decision carry a deep link to the page where it is made:
//
//	eng, err := middleware.New(reg, middleware.WithApprovalURL(approvalconsole.Link("https://ops.example.com/console")))
func Link(base string) func(id string) string {
	base = strings.TrimSuffix(base, "/")
	return func(id string) string { return base + "/approvals/" + url.PathEscape(id) }
}

// page serves one approval's page, GET /approvals/{id}: to an authorized
// approver, for a record they may see (the engine's audience, their
// tenant), with the checks of GET /api/approvals/{id}; anyone else gets
// the same refusals. The page then reads the approval, with its votes so
// far, through the API, and decides it there.
func (c *console) page(w http.ResponseWriter, r *http.Request) {
	a, ok := c.approver(w, r)
	if !ok {
		return
	}
	if _, ok := c.record(w, r, a); !ok {
		return
	}
	html, err := fs.ReadFile(assets, "assets/approval.html")
	if err != nil {
		unavailable(w)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(html)
}
