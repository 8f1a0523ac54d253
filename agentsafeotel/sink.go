package agentsafeotel

import (
	"context"

	"github.com/agentsafe/agentsafe/middleware"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// HandleEvent implements [middleware.EventSink]. Approval steps become
// events on the span in ctx: the execution's span for the steps an
// execution takes (requested, consumed, denied, stale; the engine delivers them in
// the context its tracer made), the decider's own span, if any, for
// approved and rejected. Final, retried, approved/rejected and
// abandoned_result events feed the metrics. Comments, error texts and
// stacks are left out: they are text people or handlers wrote.
func (i *Instrumentation) HandleEvent(ctx context.Context, e middleware.Event) {
	if ctx.Value(filteredKey{}) != nil || !i.keep(middleware.ExecutionInfo{ID: e.ExecutionID, Procedure: e.Procedure, Actor: e.Actor, SideEffect: e.SideEffect, Risk: e.Risk}) {
		return
	}
	switch e.Type {
	case middleware.EventApprovalRequested, middleware.EventApprovalConsumed, middleware.EventApprovalDenied, middleware.EventApprovalStale:
		i.spanEvent(ctx, e)
	case middleware.EventApproved, middleware.EventRejected:
		i.spanEvent(ctx, e)
		decision := "approved"
		if e.Type == middleware.EventRejected {
			decision = "rejected"
		}
		i.approvalWait.Record(ctx, e.Duration.Seconds(), i.metricAttrs(e, keyDecision.String(decision)))
	case middleware.EventStarted, middleware.EventBudgetExceeded:
		if e.Budget == "" {
			return
		}
		budget := i.metricAttrs(e, keyBudget.String(e.Budget))
		i.spent.Record(ctx, e.Spent, budget)
		i.limit.Record(ctx, e.Limit, budget)
		if e.Type == middleware.EventBudgetExceeded {
			i.exceeded.Add(ctx, 1, budget)
		}
		i.spanEvent(ctx, e)
	case middleware.EventRetried:
		i.retries.Add(ctx, 1, i.metricAttrs(e, keyPreviousCode.String(e.PreviousErrorCode.String())))
	case middleware.EventAbandonedResult:
		i.abandoned.Add(ctx, 1, i.metricAttrs(e, keySucceeded.Bool(e.Succeeded)))
	case middleware.EventCompleted, middleware.EventFailed, middleware.EventCancelled:
		n := i.names.get(e.Procedure)
		code := n.byCode(i, e.Code)
		i.executions.Add(ctx, 1, code)
		i.duration.Record(ctx, e.Duration.Seconds(), code)
		if e.Attempts > 0 {
			i.attempts.Record(ctx, int64(e.Attempts), n.plain(i))
		}
	}
}

// metricAttrs are the low-cardinality attributes of a metric point: never
// ids or digests.
func (i *Instrumentation) metricAttrs(e middleware.Event, extra ...attribute.KeyValue) metric.MeasurementOption {
	attrs := make([]attribute.KeyValue, 0, len(i.system)+2+len(extra))
	attrs = append(append(attrs, i.system...), i.names.get(e.Procedure).attrs...)
	attrs = append(attrs, extra...)
	return metric.WithAttributes(attrs...)
}

func (i *Instrumentation) spanEvent(ctx context.Context, e middleware.Event) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{keyApprovalID.String(e.ApprovalID)}
	if e.Budget != "" {
		attrs = append(attrs, keyBudget.String(e.Budget), keyAmount.Int64(e.Amount), keySpent.Int64(e.Spent), keyLimit.Int64(e.Limit))
	}
	switch e.Type {
	case middleware.EventBudgetExceeded:
		if e.RetryAfter > 0 {
			attrs = append(attrs, keyRetryAfter.Float64(e.RetryAfter.Seconds()))
		}
	case middleware.EventApprovalRequested:
		attrs = append(attrs, keyReason.String(e.Reason))
	case middleware.EventApprovalDenied, middleware.EventApprovalStale:
		attrs = append(attrs, keyCode.String(e.Code.String()), keyReason.String(e.Reason))
	case middleware.EventApprovalConsumed:
		attrs = append(attrs, keyApproverID.String(e.Approver.ID))
	case middleware.EventApproved, middleware.EventRejected:
		attrs = append(attrs,
			keyExecutionID.String(e.ExecutionID), // the execution that requested it
			keyApproverID.String(e.Approver.ID),
		)
	}
	if e.Type == middleware.EventApproved || e.Type == middleware.EventRejected {
		attrs = append(attrs, i.names.get(e.Procedure).attrs...)
	}
	span.AddEvent(string(e.Type), trace.WithAttributes(attrs...), trace.WithTimestamp(e.Time))
}
