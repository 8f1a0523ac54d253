// Package digest computes the canonical input digest that binds an approval
// to the exact input it was granted for. Every adapter computes its
// digests here, so one input yields the same bytes whichever framework carried
// it, on every process and every version.
//
// A digest is "sha256:" followed by 64 lowercase hex digits:
//
//	d, err := digest.JSON("/shop.v1.Orders/Refund", body)   // a JSON input
//	d, err = digest.Proto("/shop.v1.Orders/Refund", msg)    // a decoded protobuf message
//	d, err = digest.HTTP(digest.HTTPRequest{                // a net/http route
//		Procedure: "refund", Method: r.Method, Path: r.URL.EscapedPath(),
//		Query: r.URL.Query(), Header: r.Header, BoundHeaders: []string{"X-Tenant"},
//		Body: body,
//	})
//	if errors.Is(err, digest.ErrUnbindable) { /* INVALID_ARGUMENT */ }
//	onEvent := digest.Keyed(deploymentKey, d)              // what events carry
//
// # Pre-image
//
// The digest is SHA-256 over a sequence of fields. A string field is its
// length as an 8-byte big-endian unsigned integer followed by its bytes; a
// count is an 8-byte big-endian unsigned integer on its own. The fields are,
// in order:
//
//	string  "agentsafe.v1.input-digest"       the domain tag, fixed forever
//	string  procedure
//	string  "rpc" | "http"                    the form of what follows
//	http only:
//	  string  method                          as sent ("" means GET); case is significant
//	  string  path                            cleaned as http.ServeMux does
//	  count   query keys; per key in byte order:   string key, count values, string value...
//	  count   bound headers; per name in byte order: string canonical name, count values, string value...
//	string  "json" | "raw"                    the body kind
//	string  body                              RFC 8785 (JCS) canonical JSON, or the raw bytes
//
// Repeated values of one query key or header keep their order: a handler
// reading [net/url.Values.Get] or [net/http.Header.Get] sees the first one, so
// reordering them can change what runs. Different keys, and header names, are
// sorted, so their order on the wire does not matter.
//
// [Proto] renders the message with pinned protojson options and
// canonicalizes the result, so Proto(p, m) equals
// JSON(p, protojson.Marshal(m)) whenever JSON accepts that rendering, and a
// message decoded from the binary or the JSON codec binds the same way.
//
// [HTTP] canonicalizes a body whose Content-Type is a JSON media type and
// binds any other body, and an empty one, byte for byte.
//
// # Canonical form
//
// The canonical form is RFC 8785's, written by this package rather than by
// github.com/gowebpki/jcs, which builds the whole document as a tree of
// Go strings first and so allocates many times the input. Here one pass
// checks the document and computes the length of its canonical form (the
// pre-image needs it before the bytes), a second indexes where object
// member names start (5 bytes a member, and a member takes at least 5 bytes
// of input), and a third streams the canonical form into the hash: arrays,
// strings and numbers straight from the input, each object's members
// sorted in place and their values read again where they are. Checking and
// digesting JSON take time linear in the input (sorting names aside) and
// allocate at most twice the input and 64 KiB, whatever the document's
// shape. A differential fuzz test holds the output to jcs byte
// for byte.
//
// # Refusals
//
// An input that cannot be bound faithfully is refused with an error wrapping
// [ErrUnbindable]; the engine answers INVALID_ARGUMENT. For JSON this is
// anything that is not I-JSON (RFC 7493) in a way that could make two
// different inputs share a digest, or one input mean two things:
//
//   - not exactly one well-formed JSON value (syntax errors, trailing data,
//     an empty document);
//   - invalid UTF-8 anywhere in the document, and \u escapes that encode an
//     unpaired surrogate (encoding/json turns both into U+FFFD silently);
//   - duplicate member names in one object, exact or under the simple Unicode
//     case folding encoding/json uses to match names to struct fields
//     ("a" and "A" collide, so do "k" and the Kelvin sign U+212A);
//   - arrays and objects nested deeper than 64 levels;
//   - a number whose exact decimal value is an integer of magnitude above
//     2^53−1, whatever its spelling: 9007199254740992, 1e16 and
//     9007199254740993.0 are all refused, because JCS rounds them to a
//     double while a handler decoding into an int64 would not;
//   - any other number whose exact decimal value differs from the value of
//     the shortest form that round-trips to its nearest double, which is
//     what JCS writes: 12345678901234567.1 (written 12345678901234568),
//     0.10000000000000000555 (0.1), 1e-400 (0) and 4.9e-324 (5e-324) are
//     refused, because otherwise two different amounts would share a
//     digest. 0.1, 0.10, 1.0, 1e0, -0 and 5e-324 bind: -0 and 0 are the
//     same input, as are 1, 1.0 and 1e0.
//
// Unicode is never normalized: "é" (U+00E9) and "e" + U+0301 are different
// inputs with different digests, while the escaped and literal spellings of
// one string ("\u00e9" and "é") are the same input. Noncharacters such as
// U+FFFF are accepted: they are bound byte for byte.
//
// For protobuf messages, unknown fields anywhere in the message (nested
// messages, lists, map values, and the payload of a google.protobuf.Any) are
// refused, because protojson drops them; so is a rendering nested deeper
// than 64 levels. The client-JSON checks do not apply to a decoded message
// (protojson writes 64-bit integers as strings, and JSON names that differ
// only in case are distinct fields), but what jcs refuses is refused too:
// exact duplicate names, numbers beyond the range of a double. Proto
// allocates what protojson needs to render the message, several times its
// size, before the streaming canonicalization.
//
// The digest is stable for one schema. A schema change that alters the
// protojson rendering (a renamed field) changes it, which makes a resume
// across the change fail closed; a field the server's schema does not know
// is refused as unknown.
package digest
