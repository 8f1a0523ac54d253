package twirpadapter

import (
	"errors"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	agentsafev1 "github.com/agentsafe/agentsafe/proto/agentsafe/v1"
	"github.com/twitchtv/twirp"
)

// The keys of the Twirp error meta that an error agentsafe itself decided
// carries: the envelope, for clients (see [EnvelopeFromError]). A
// handler's own twirp.Error never gains them.
const (
	// MetaCode is the agentsafe code, for example "TIMEOUT".
	MetaCode = "agentsafe_code"
	// MetaRetryable is "true" when re-invoking the call is safe for the
	// caller, "false" otherwise.
	MetaRetryable = "agentsafe_retryable"
	// MetaExecutionID is the execution id.
	MetaExecutionID = "agentsafe_execution_id"
	// MetaAttempts is the number of attempts the execution ran.
	MetaAttempts = "agentsafe_attempts"
	// MetaApprovalID is the approval id the execution requested or
	// consumed, when it has one.
	MetaApprovalID = "agentsafe_approval_id"
	// MetaApprovalURL and MetaApprovalExpires are where a person decides
	// the approval and until when (RFC 3339), on APPROVAL_REQUIRED and
	// APPROVAL_PENDING (see middleware.WithApprovalURL).
	MetaApprovalURL     = "agentsafe_approval_url"
	MetaApprovalExpires = "agentsafe_approval_expires"
	// MetaRetryAfter is, on BUDGET_EXCEEDED, the whole seconds (rounded
	// up) until enough of the budget's window frees; the response also
	// carries them as the Retry-After header.
	MetaRetryAfter = "agentsafe_retry_after"
)

// twirpCodes is the one table between Twirp's error codes and the
// canonical RPC codes (the numbering gRPC and Connect share), which index
// it.
var twirpCodes = [...]twirp.ErrorCode{
	0:  twirp.NoError,
	1:  twirp.Canceled,
	2:  twirp.Unknown,
	3:  twirp.InvalidArgument,
	4:  twirp.DeadlineExceeded,
	5:  twirp.NotFound,
	6:  twirp.AlreadyExists,
	7:  twirp.PermissionDenied,
	8:  twirp.ResourceExhausted,
	9:  twirp.FailedPrecondition,
	10: twirp.Aborted,
	11: twirp.OutOfRange,
	12: twirp.Unimplemented,
	13: twirp.Internal,
	14: twirp.Unavailable,
	15: twirp.DataLoss,
	16: twirp.Unauthenticated,
}

// canonical returns the canonical RPC code of a Twirp error code. Twirp's
// two codes of its own read as their nearest: a request that did not
// decode is invalid_argument (as Connect says), a path that names no
// method unimplemented (as gRPC says).
func canonical(c twirp.ErrorCode) uint32 {
	switch c {
	case twirp.Malformed:
		return 3
	case twirp.BadRoute:
		return 12
	}
	if i := slices.Index(twirpCodes[:], c); i > 0 {
		return uint32(i)
	}
	return 2 // unknown
}

// status is the adapter's one function from Twirp's errors to codes (see
// [adapter.Call]).
func status(err error) (uint32, string, bool) {
	twerr, ok := errors.AsType[twirp.Error](err)
	if !ok {
		return 0, "", false
	}
	return canonical(twerr.Code()), twerr.Msg(), true
}

// twirpError writes a failed execution as a Twirp error. A twirp.Error the
// handler returned passes unchanged, except for agentsafe_ meta relayed
// from a governed service downstream, which describes another execution.
// Every other outcome is the table's code for it and the envelope's
// message, which for a plain Go error or a panic is the concealed one; an
// outcome the engine decided carries the envelope as meta. err stays
// reachable through errors.As, for Twirp's error hooks.
func twirpError(env middleware.Envelope, err error) error {
	if own, ok := adapter.HandlerError(err); ok {
		return withoutRelayedMeta(own)
	}
	out := twirp.NewError(twirpCodes[adapter.RPCCode(err)], env.Error.Message)
	if adapter.CarriesDetail(err) {
		out = out.WithMeta(MetaCode, env.Error.Code.String()).
			WithMeta(MetaRetryable, strconv.FormatBool(env.Error.Retryable)).
			WithMeta(MetaExecutionID, env.ExecutionID).
			WithMeta(MetaAttempts, strconv.Itoa(env.Attempts))
		if env.ApprovalID != "" {
			out = out.WithMeta(MetaApprovalID, env.ApprovalID)
		}
		out = withHints(out, env)
	}
	return twirp.WrapError(out, err)
}

func withoutRelayedMeta(err error) error {
	twerr, _ := errors.AsType[twirp.Error](err) // own errors are Twirp's
	out, dropped := twirp.NewError(twerr.Code(), twerr.Msg()), false
	for k, v := range twerr.MetaMap() {
		if strings.HasPrefix(k, "agentsafe_") {
			dropped = true
		} else {
			out = out.WithMeta(k, v)
		}
	}
	if !dropped {
		return err
	}
	return twirp.WrapError(out, err)
}

// EnvelopeFromError reads the envelope an error agentsafe decided carries
// in its meta. It reports false for nil, for errors that are not Twirp
// errors, and for Twirp errors without the envelope: a handler's own error
// and a cancelled call carry it only in the response headers (read them
// with [RecordEnvelope]), an ungoverned method and a request Twirp could
// not decode have none.
func EnvelopeFromError(err error) (middleware.Envelope, bool) {
	twerr, ok := errors.AsType[twirp.Error](err)
	if !ok || twerr.Meta(MetaExecutionID) == "" {
		return middleware.Envelope{}, false
	}
	attempts, _ := strconv.Atoi(twerr.Meta(MetaAttempts))
	return adapter.EnvelopeFromDetail(&agentsafev1.ErrorDetail{
		Code:        twerr.Meta(MetaCode),
		Retryable:   twerr.Meta(MetaRetryable) == "true",
		ExecutionId: twerr.Meta(MetaExecutionID),
		ApprovalId:  twerr.Meta(MetaApprovalID),
		Attempts:    int32(attempts),
		ApprovalUrl: twerr.Meta(MetaApprovalURL),
		ExpiresAt:   twerr.Meta(MetaApprovalExpires),
		RetryAfter:  retryAfterMeta(twerr.Meta(MetaRetryAfter)),
	}, twerr.Msg()), true
}

// retryAfterMeta reads MetaRetryAfter; nil when absent or malformed.
func retryAfterMeta(v string) *durationpb.Duration {
	if d := adapter.ParseRetryAfter(v); d > 0 {
		return durationpb.New(d)
	}
	return nil
}
