package nethttpadapter_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/nethttpadapter"
)

// A typo in a wrapped procedure's name must not leave the route unprotected:
// Wrap refuses it at start-up, as http.ServeMux.Handle does a bad pattern,
// in strict mode too, naming the procedure and the fix.
func TestWrapOfAProcedureTheEngineDoesNotGovernPanicsAtStartUp(t *testing.T) {
	t.Parallel()
	reg := func() *middleware.Registry {
		return middleware.NewRegistry().Register("restock", middleware.Capability{SideEffect: middleware.SideEffectWrite})
	}
	for _, tc := range []struct {
		name string
		opts []middleware.Option
	}{
		{"default", nil},
		{"strict", []middleware.Option{middleware.WithStrict()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			eng, err := middleware.New(reg(), append(tc.opts, middleware.WithProtoFiles(nil))...)
			if err != nil {
				t.Fatal(err)
			}
			var ran bool
			h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true })
			msg := panicMessage(func() { nethttpadapter.Wrap(eng, "restok", h) })
			if msg == "" {
				t.Fatal(`Wrap(eng, "restok", h) returned for a procedure the engine does not govern; it must panic at start-up`)
			}
			for _, want := range []string{`"restok"`, "register", "Wrap"} {
				if !strings.Contains(msg, want) {
					t.Errorf("panic %q should name the procedure and the fix (register it, or do not wrap): missing %q", msg, want)
				}
			}
			if ran {
				t.Error("the handler ran at construction")
			}
			if msg := panicMessage(func() { nethttpadapter.Wrap(eng, "restock", h) }); msg != "" {
				t.Errorf("Wrap of a governed procedure panicked: %s", msg)
			}
		})
	}
}

// panicMessage runs f and returns what it panicked with, as text; "" when it
// returned.
func panicMessage(f func()) (msg string) {
	defer func() {
		if v := recover(); v != nil {
			msg = fmt.Sprint(v)
		}
	}()
	f()
	return ""
}
