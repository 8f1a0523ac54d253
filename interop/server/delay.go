package main

import (
	"context"
	"time"
)

// delay is how a handler waits the response delay a definition asks for.
//
// By default it sleeps the whole delay, whatever its context does, as the
// suite's reference servers do. Such a handler never answers at the
// client's deadline: the client's own timer ends the call first. With
// honourContext, the wait ends when the handler's context does, and the
// handler fails with the context's error, as a handler doing real work
// would: the framework then answers DEADLINE_EXCEEDED at the deadline the
// client sent, which is what agentsafe's engine does for any handler
// (bounded reporting, SPEC §3). README.md, "A race at the deadline", says
// why run.sh's comparison needs such a server.
type delay struct {
	honourContext bool
}

// wait waits ms milliseconds, or until ctx ends if d honours the context;
// then it returns ctx's error, nil if the whole delay passed.
func (d delay) wait(ctx context.Context, ms uint32) error {
	if !d.honourContext {
		time.Sleep(time.Duration(ms) * time.Millisecond)
		return nil
	}
	t := time.NewTimer(time.Duration(ms) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
