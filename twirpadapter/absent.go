package twirpadapter

import (
	"fmt"

	"github.com/twitchtv/twirp"
)

// absent is the error a hidden call ends with (see adapter.Hidden):
// exactly what a Twirp-generated server answers for a path it has no
// handler for — bad_route (HTTP 404), "no handler for path", and the
// twirp_invalid_route meta naming the request.
func absent(w *wire) error {
	return twirp.NewError(twirp.BadRoute, fmt.Sprintf("no handler for path %q", w.path)).
		WithMeta("twirp_invalid_route", w.method+" "+w.path)
}
