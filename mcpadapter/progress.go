package mcpadapter

import (
	"context"
	"fmt"
	"sync"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ProgressSink returns the event sink that turns the runtime retries of a
// tool call into MCP progress notifications, for calls whose client sent a
// progress token. Install it on the engine:
//
//	eng, err := middleware.New(reg, middleware.WithEventSink(mcpadapter.ProgressSink()))
//
// Each capability.retried event of a bridged call becomes one notification
// on the call's own request: progress is the number of the attempt about
// to start (2, 3, …), total the most attempts the capability allows, and
// the message names the previous attempt's error code. A call is matched to
// its events through its context, which the engine hands to sinks: the
// sink does nothing for calls that did not come through a bridge, or whose
// client sent no token. It never blocks the execution: notifications are
// queued and sent, in order, before the tool result.
//
// Without it, tool calls work the same and report no progress.
func ProgressSink() middleware.EventSink { return progressSink{} }

type progressSink struct{}

func (progressSink) HandleEvent(ctx context.Context, e middleware.Event) {
	if e.Type != middleware.EventRetried {
		return
	}
	p, ok := ctx.Value(progressKey{}).(*progress)
	if !ok || p.procedure != e.Procedure {
		return
	}
	p.send(&mcp.ProgressNotificationParams{
		ProgressToken: p.token,
		Progress:      float64(e.Attempt),
		Total:         p.total,
		Message:       fmt.Sprintf("attempt %d of at most %d: retrying after %s", e.Attempt, int(p.total), e.PreviousErrorCode),
	})
}

type progressKey struct{}

// progress is one tool call's queue of notifications.
type progress struct {
	procedure string
	token     any
	total     float64

	mu     sync.Mutex
	closed bool
	queue  chan *mcp.ProgressNotificationParams
}

// progressQueue bounds the notifications waiting to be sent; more retries
// than this cannot be configured sensibly, and extra ones are dropped.
const progressQueue = 16

// startProgress returns a context that carries the call's progress
// reporter to the engine's sinks, and a function that sends what is still
// queued and stops; call it before returning the result.
func (t *tool) startProgress(ctx context.Context, session *mcp.ServerSession, token any) (context.Context, func()) {
	p := &progress{
		procedure: t.procedure,
		token:     token,
		total:     float64(1 + t.capability.Retry.MaxRetries),
		queue:     make(chan *mcp.ProgressNotificationParams, progressQueue),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for n := range p.queue {
			// The call's own context routes the notification to the
			// request's stream; a failed send only loses progress.
			_ = session.NotifyProgress(ctx, n)
		}
	}()
	return context.WithValue(ctx, progressKey{}, p), func() {
		p.mu.Lock()
		p.closed = true
		close(p.queue)
		p.mu.Unlock()
		<-done
	}
}

func (p *progress) send(n *mcp.ProgressNotificationParams) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	select {
	case p.queue <- n:
	default:
	}
}
