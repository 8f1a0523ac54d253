package twirpadapter

import (
	"strconv"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/twitchtv/twirp"
)

// withHints adds the approval hints of env to an error agentsafe decided:
// where a person decides the approval, and until when; or when to try a
// call a budget refused again.
func withHints(err twirp.Error, env middleware.Envelope) twirp.Error {
	if env.ApprovalURL != "" {
		err = err.WithMeta(MetaApprovalURL, env.ApprovalURL)
	}
	if !env.ExpiresAt.IsZero() {
		err = err.WithMeta(MetaApprovalExpires, env.ExpiresAt.UTC().Format(time.RFC3339))
	}
	if env.RetryAfter > 0 {
		err = err.WithMeta(MetaRetryAfter, strconv.FormatInt(adapter.RetryAfterSeconds(env.RetryAfter), 10))
	}
	return err
}
