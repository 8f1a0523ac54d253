package twirpadapter

import (
	"time"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/twitchtv/twirp"
)

// withHints adds the approval hints of env to an error agentsafe decided:
// where a person decides the approval, and until when.
func withHints(err twirp.Error, env middleware.Envelope) twirp.Error {
	if env.ApprovalURL != "" {
		err = err.WithMeta(MetaApprovalURL, env.ApprovalURL)
	}
	if !env.ExpiresAt.IsZero() {
		err = err.WithMeta(MetaApprovalExpires, env.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return err
}
