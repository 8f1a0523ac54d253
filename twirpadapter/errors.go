package twirpadapter

import (
	"errors"
	"strconv"
	"strings"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/twitchtv/twirp"
)

const metaPrefix = "agentsafe_"

// The keys of the Twirp error meta a governed call's error carries: the
// envelope, for clients (see [EnvelopeFromError]).
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
)

// twirpCodes is the one table from the canonical RPC code an agentsafe code
// is written as (see [middleware.Code.RPCCode]) to Twirp's error code.
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

func twirpCode(c middleware.Code) twirp.ErrorCode {
	if n := c.RPCCode(); int(n) < len(twirpCodes) && n != 0 {
		return twirpCodes[n]
	}
	return twirp.Internal
}

// toTwirpError writes a failed envelope as a Twirp error. A twirp.Error the
// handler returned on purpose keeps its code, message and meta (except
// agentsafe_* keys, which belong to another execution); every other
// outcome is the envelope's code (through the table) and message, which
// for a plain Go error or a panic is the concealed one. The envelope is
// added as meta either way, and err stays reachable through errors.As, for
// Twirp's error hooks.
func toTwirpError(env middleware.Envelope, err error) twirp.Error {
	e := env.Error
	var out twirp.Error
	var own twirp.Error
	if e.Code == middleware.CodeExecutionFailed && errors.As(err, &own) {
		out = twirp.NewError(own.Code(), own.Msg())
		for k, v := range own.MetaMap() {
			// An error relayed from a governed service downstream carries
			// that execution's envelope: it is not this one's.
			if !strings.HasPrefix(k, metaPrefix) {
				out = out.WithMeta(k, v)
			}
		}
	} else {
		out = twirp.NewError(twirpCode(e.Code), e.Message)
	}
	out = out.WithMeta(MetaCode, e.Code.String()).
		WithMeta(MetaRetryable, strconv.FormatBool(e.Retryable)).
		WithMeta(MetaExecutionID, env.ExecutionID).
		WithMeta(MetaAttempts, strconv.Itoa(env.Attempts))
	if env.ApprovalID != "" {
		out = out.WithMeta(MetaApprovalID, env.ApprovalID)
	}
	return twirp.WrapError(out, err)
}

// EnvelopeFromError reads the envelope a governed call's error carries in
// its meta. It reports false for nil, for errors that are not Twirp errors,
// and for Twirp errors without the envelope (an ungoverned method, or a
// failure before the call reached the engine, such as a malformed request).
func EnvelopeFromError(err error) (middleware.Envelope, bool) {
	var twerr twirp.Error
	if err == nil || !errors.As(err, &twerr) || twerr.Meta(MetaExecutionID) == "" {
		return middleware.Envelope{}, false
	}
	code, ok := middleware.ParseCode(twerr.Meta(MetaCode))
	if !ok {
		return middleware.Envelope{}, false
	}
	attempts, _ := strconv.Atoi(twerr.Meta(MetaAttempts))
	return middleware.Envelope{
		ExecutionID: twerr.Meta(MetaExecutionID),
		Status:      middleware.StatusOf(code),
		Attempts:    attempts,
		ApprovalID:  twerr.Meta(MetaApprovalID),
		Error: &middleware.EnvelopeError{
			Code:      code,
			Message:   twerr.Msg(),
			Retryable: twerr.Meta(MetaRetryable) == "true",
		},
	}, true
}
