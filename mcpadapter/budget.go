package mcpadapter

import (
	"fmt"
	"strings"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// budgetNotes describes a capability's budgets to a model, one sentence
// each, for the tool's description: what it may spend, whose spending
// counts together, over what window, and what happens past it. A model
// that knows the limit plans within it instead of finding it by looping.
func budgetNotes(c middleware.Capability, in protoreflect.MessageDescriptor) []string {
	var out []string
	for _, b := range c.Budgets {
		what := fmt.Sprintf("%d calls", b.Limit)
		if b.Amount != "" {
			what = fmt.Sprintf("a total %s of %d", jsonPath(in, b.Amount), b.Limit)
		}
		past := "a call past it is refused (BUDGET_EXCEEDED), saying when to try again"
		if b.Over == "require_approval" {
			past = "a call past it waits for a person's approval"
		}
		out = append(out, fmt.Sprintf("Budget %q: at most %s per %s in any %s; %s.", b.Name, what, b.Per, window(b.Window), past))
	}
	return out
}

// jsonPath names the amount's field as the tool's arguments do: dotted
// JSON names ("amountCents"); the path as declared when it names no field.
func jsonPath(in protoreflect.MessageDescriptor, path string) string {
	var names []string
	md := in
	for _, name := range strings.Split(path, ".") {
		if md == nil {
			return path
		}
		fd := md.Fields().ByName(protoreflect.Name(name))
		if fd == nil {
			return path
		}
		names = append(names, fd.JSONName())
		md = fd.Message()
	}
	return strings.Join(names, ".")
}

// window writes a duration the way people do: "24h", "1h", "90s".
func window(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}
