package middleware

import (
	"errors"
	"strconv"
	"strings"

	"github.com/agentsafe/agentsafe/internal/ids"
)

// headerIdempotencyKey is the request header (Connect and gRPC metadata,
// Twirp header) a caller's key arrives in.
const headerIdempotencyKey = "Idempotency-Key"

// maxCallerKey is the longest caller key, in characters after unescaping.
const maxCallerKey = 255

// parseCallerKey reads the value of an Idempotency-Key header in either
// spelling the specification accepts: an RFC 9651 sf-string ("…", with
// \" and \\ escapes, printable ASCII inside) or a bare token of visible
// ASCII without quotes, backslashes or spaces; 1 to 255 characters after
// unescaping, either way. Both spellings of one value are one key: `abc`
// and `"abc"` read as abc. Spaces around the value are ignored, as RFC
// 9651 parsing discards them; parameters, lists and anything else are
// refused.
func parseCallerKey(raw string) (string, error) {
	v := strings.Trim(raw, " ")
	if v == "" {
		return "", errors.New("it is empty")
	}
	if v[0] != '"' {
		for i := 0; i < len(v); i++ {
			if c := v[i]; c <= ' ' || c > '~' || c == '"' || c == '\\' {
				return "", errors.New("a bare key is visible ASCII without quotes, backslashes or spaces; quote it as a structured-field string otherwise")
			}
		}
		if len(v) > maxCallerKey {
			return "", errors.New("it is longer than " + strconv.Itoa(maxCallerKey) + " characters")
		}
		return v, nil
	}
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", errors.New(`a structured-field string escapes only \" and \\`)
			}
			b.WriteByte(v[i])
		case c == '"':
			if i != len(v)-1 {
				return "", errors.New("it must be one structured-field string, without parameters")
			}
			if b.Len() == 0 || b.Len() > maxCallerKey {
				return "", errors.New("a key is 1 to " + strconv.Itoa(maxCallerKey) + " characters")
			}
			return b.String(), nil
		case c < ' ' || c > '~':
			return "", errors.New("a structured-field string holds printable ASCII only")
		default:
			b.WriteByte(c)
		}
	}
	return "", errors.New("the structured-field string is not closed")
}

// callerResultKey is the record key of a caller's key: derived from the
// audience, the whole actor and the procedure too, so that one caller key
// is never shared across actors, procedures or deployments. It is also the
// execution's idempotency key.
func callerResultKey(audience string, a Actor, procedure, callerKey string) string {
	return ids.Derive(idempotencyKeyPrefix, actorParts("key", audience, a, procedure, callerKey)...)
}

// dedupResultKey is the record key of a dedup window: the same form over
// the input digest instead of a caller key.
func dedupResultKey(audience string, a Actor, procedure, digest string) string {
	return ids.Derive(idempotencyKeyPrefix, actorParts("dedup", audience, a, procedure, digest)...)
}

// resultOwner is the owner of the records an actor's calls claim, whose
// quota they count against (WithResultQuota): derived from the audience
// and the whole actor, as the record keys are.
func resultOwner(audience string, a Actor) string {
	return ids.Derive(resultOwnerPrefix, actorParts("owner", audience, a, "", "")...)
}

// resultOwnerPrefix starts an owner: store.ResultKey.Valid checks it.
const resultOwnerPrefix = "own_"

// actorParts lists what a derived key is over, each part length-prefixed
// by ids.Derive: a domain, the audience, the whole actor (its chain
// counted, so parts cannot shift), the procedure and last.
func actorParts(domain, audience string, a Actor, procedure, last string) []string {
	parts := make([]string, 0, 8+len(a.OnBehalfOf))
	parts = append(parts, domain, audience, a.ID, a.Tenant, a.Kind, strconv.Itoa(len(a.OnBehalfOf)))
	parts = append(parts, a.OnBehalfOf...)
	return append(parts, procedure, last)
}
