package approvalconsole

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"net/http"

	"github.com/agentsafe/agentsafe/middleware"
)

// TokenHeader is the request header a decision carries its token in. Like
// agentsafe's other headers (Agentsafe-Approval-Id, Agentsafe-Execution-Id)
// it has no "X-" prefix (RFC 6648).
const TokenHeader = "Agentsafe-Csrf-Token"

// token is the approver's decision token: an HMAC under the console's key
// of the approver's tenant and id (and session, with WithSession),
// length-prefixed so no two identities share an input.
func (c *console) token(r *http.Request, a middleware.Actor) string {
	m := hmac.New(sha256.New, c.cfg.key)
	session := ""
	if c.cfg.session != nil {
		session = c.cfg.session(r)
	}
	for _, part := range []string{"agentsafe approval console decision token v1", a.Tenant, a.ID, session} {
		m.Write(binary.BigEndian.AppendUint32(nil, uint32(len(part))))
		m.Write([]byte(part))
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// validToken compares in constant time.
func (c *console) validToken(r *http.Request, a middleware.Actor) bool {
	got := r.Header.Get(TokenHeader)
	return got != "" && hmac.Equal([]byte(got), []byte(c.token(r, a)))
}
