package middleware

import (
	"errors"

	"github.com/agentsafe/agentsafe/internal/seam"
)

// errNoResultKey is what sealing fails with on an engine without
// WithResultKey.
var errNoResultKey = errors.New("agentsafe: this engine has no result key to seal with (WithResultKey)")

// sealContext tags what a bridge seals, apart from the stored results
// sealed under the same keys.
const sealContext = "agentsafe sealed bytes v1\x00"

func init() {
	seam.Seal = func(engine any, plain []byte, context string) ([]byte, error) {
		e, _ := engine.(*Engine)
		if e == nil || e.cfg.resultKeys == nil {
			return nil, errNoResultKey
		}
		sealed, id := e.cfg.resultKeys.seal(plain, sealContext+context, "")
		if len(id) > 255 {
			return nil, errors.New("agentsafe: the result key's ID is longer than 255 bytes")
		}
		out := make([]byte, 0, 1+len(id)+len(sealed))
		out = append(out, byte(len(id)))
		out = append(out, id...)
		return append(out, sealed...), nil
	}
	seam.Open = func(engine any, sealed []byte, context string) ([]byte, error) {
		e, _ := engine.(*Engine)
		if e == nil || e.cfg.resultKeys == nil {
			return nil, errNoResultKey
		}
		if len(sealed) == 0 || len(sealed) < 1+int(sealed[0]) {
			return nil, errors.New("agentsafe: the sealed bytes are truncated")
		}
		n := 1 + int(sealed[0])
		return e.cfg.resultKeys.open(sealed[n:], string(sealed[1:n]), sealContext+context, "")
	}
}
