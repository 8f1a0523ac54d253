package digest

import "bytes"

// Canonical returns the RFC 8785 form that [JSON] binds for doc.
func Canonical(doc []byte) ([]byte, error) { return canonicalBytes(doc, checked) }

// CanonicalRendered returns the RFC 8785 form that [Proto] binds for its
// protojson rendering doc.
func CanonicalRendered(doc []byte) ([]byte, error) { return canonicalBytes(doc, rendered) }

func canonicalBytes(doc []byte, m mode) ([]byte, error) {
	c, err := checkJSON(doc, m)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := c.emit(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
