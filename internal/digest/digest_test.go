package digest_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentsafe/agentsafe/internal/digest"
)

var digestForm = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// preimage lays out fields as the package documentation specifies, written
// out independently of the package so the documentation is checked too.
type preimage []byte

func (p preimage) count(n int) preimage  { return binary.BigEndian.AppendUint64(p, uint64(n)) }
func (p preimage) str(s string) preimage { return append(p.count(len(s)), s...) }
func (p preimage) digest() string {
	sum := sha256.Sum256(p)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func TestLayoutMatchesDocumentation(t *testing.T) {
	t.Parallel()
	t.Run("json", func(t *testing.T) {
		t.Parallel()
		want := preimage(nil).str("agentsafe.v1.input-digest").str("/p.S/M").str("rpc").
			str("json").str(`{"a":[1,"é"],"b":100}`).digest()
		got, err := digest.JSON("/p.S/M", []byte(`{"b":1e2, "a":[1.0,"\u00e9"]}`))
		if err != nil || got != want {
			t.Fatalf("JSON = %s, %v; want %s", got, err, want)
		}
	})
	t.Run("http", func(t *testing.T) {
		t.Parallel()
		want := preimage(nil).str("agentsafe.v1.input-digest").str("refund").str("http").
			str("POST").str("/a/c/").
			count(2).str("x").count(2).str("2").str("1").str("y").count(1).str("").
			count(2).str("X-Absent").count(0).str("X-Tenant").count(1).str("acme").
			str("raw").str("hello").digest()
		got, err := digest.HTTP(digest.HTTPRequest{
			Procedure:    "refund",
			Method:       "POST",
			Path:         "a/b/../c/",
			Query:        url.Values{"y": {""}, "x": {"2", "1"}},
			Header:       http.Header{"X-Tenant": {"acme"}, "X-Other": {"ignored"}, "Content-Type": {"text/plain"}},
			BoundHeaders: []string{"x-tenant", "X-Absent"},
			Body:         []byte("hello"),
		})
		if err != nil || got != want {
			t.Fatalf("HTTP = %s, %v; want %s", got, err, want)
		}
	})
}

func TestRefusals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, doc, msg string
	}{
		{"duplicate name", `{"a":1,"a":2}`, `duplicate member name "a" in the object at the top level`},
		{"duplicate under ASCII case folding", `{"a":1,"A":2}`, `duplicate member name "A" in the object at the top level (equal to "a" under case folding`},
		{"duplicate under Unicode case folding", `{"k":1,"\u212a":2}`, `duplicate member name "\u212a" in the object at the top level (equal to "k" under case folding`},
		{"duplicate under folding of non-ASCII", `{"é":1,"É":2}`, `duplicate member name "\u00c9"`},
		{"duplicate spelled with escapes", `{"a":1,"\u0061":2}`, `duplicate member name "a"`},
		{"duplicate nested", `{"x":[0,{"id":1,"ID":2}]}`, `in the object at "/x/1"`},
		{"duplicate pointer escaping", `{"a/b~":{"n":1,"N":1}}`, `in the object at "/a~1b~0"`},
		{"integer 2^53", `{"n":9007199254740992}`, `number 9007199254740992 at "/n" is an integer beyond ±(2^53−1)`},
		{"integer -2^53", `[-9007199254740992]`, `number -9007199254740992 at "/0"`},
		{"integer 2^53+1 with fraction zero", `9007199254740993.0`, `at the top level`},
		{"integer in exponent form", `{"n":1e16}`, `number 1e16`},
		{"integer with fraction digits and exponent", `{"n":1.5e300}`, `number 1.5e300`},
		{"integer out of double range", `{"n":1e400}`, `number 1e400`},
		{"integer with huge exponent", `{"n":1E+99999999999}`, `number 1E+99999999999`},
		{"invalid UTF-8 in a string", "{\"a\":\"\xff\"}", `invalid UTF-8 at byte offset 6`},
		{"invalid UTF-8 in a name", "{\"\xc3\x28\":1}", `invalid UTF-8 at byte offset 2`},
		{"overlong UTF-8", "\"\xc0\xaf\"", `invalid UTF-8 at byte offset 1`},
		{"lone high surrogate", `{"s":"\ud800"}`, `string at "/s": unpaired surrogate \ud800`},
		{"lone low surrogate", `["\udc00"]`, `string at "/0": unpaired surrogate \udc00`},
		{"high surrogate then non-surrogate", `"\ud800\u0041"`, `unpaired surrogate \ud800`},
		{"surrogate in a name", `{"\udfff":1}`, `member name "\ufffd" in the object at the top level: unpaired surrogate \udfff`},
		{"empty", ``, `empty JSON document`},
		{"whitespace only", " \n", `empty JSON document`},
		{"unterminated", `{"a":1`, `invalid JSON`},
		{"trailing value", `{"a":1} {}`, `data after the top-level value`},
		{"trailing garbage", `{"a":1}x`, `invalid JSON`},
		{"trailing comma", `[1,]`, `invalid JSON`},
		{"single quotes", `{'a':1}`, `invalid JSON`},
		{"leading zero", `01`, `invalid JSON`},
		{"NaN", `NaN`, `invalid JSON`},
		{"byte order mark", "\ufeff{}", `invalid JSON`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d, err := digest.JSON("/p.S/M", []byte(tt.doc))
			if !errors.Is(err, digest.ErrUnbindable) {
				t.Fatalf("JSON(%q) = %q, %v; want ErrUnbindable", tt.doc, d, err)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not say %q", err, tt.msg)
			}
			// The same document over HTTP is refused alike.
			_, err = digest.HTTP(digest.HTTPRequest{
				Procedure: "p", Method: "POST", Path: "/",
				Header: http.Header{"Content-Type": {"application/json"}},
				Body:   []byte(tt.doc),
			})
			if tt.doc != "" && !errors.Is(err, digest.ErrUnbindable) {
				t.Errorf("HTTP with a JSON body %q: err = %v; want ErrUnbindable", tt.doc, err)
			}
		})
	}
}

func TestAccepted(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{
		`{"a":{"a":1},"A2":{"A":1}}`, // equal names in different objects
		`{"ß":1,"SS":2}`,             // full case folding would collide; simple folding does not
		`9007199254740991`,
		`-9007199254740991`,
		`9.007199254740991e15`,
		`90071992547409910e-1`,
		`1.5e-300`,
		`0.000`,
		`"\uffff\ufdd0"`, // noncharacters are bound byte for byte
		`"\u0000"`,
		`[[[[[]]]]]`,
		`true`,
	} {
		if d, err := digest.JSON("/p.S/M", []byte(doc)); err != nil || !digestForm.MatchString(d) {
			t.Errorf("JSON(%s) = %q, %v; want a digest", doc, d, err)
		}
	}
}

func TestProtoMatchesJSON(t *testing.T) {
	t.Parallel()
	s, err := structpb.NewStruct(map[string]any{"b": 2.5, "a": []any{"x", true, nil}, "c": map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	fromProto, err := digest.Proto("/p.S/M", s)
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := protojson.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	fromJSON, err := digest.JSON("/p.S/M", rendered)
	if err != nil {
		t.Fatal(err)
	}
	if fromProto != fromJSON {
		t.Errorf("Proto = %s, JSON of its protojson = %s; want equal", fromProto, fromJSON)
	}
	// A copy decoded from the binary codec binds the same.
	wire, err := proto.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var decoded structpb.Struct
	if err := proto.Unmarshal(wire, &decoded); err != nil {
		t.Fatal(err)
	}
	if again, err := digest.Proto("/p.S/M", &decoded); err != nil || again != fromProto {
		t.Errorf("Proto after a binary round trip = %s, %v; want %s", again, err, fromProto)
	}
}

func TestProtoRefusals(t *testing.T) {
	t.Parallel()
	unknown := protowire.AppendVarint(protowire.AppendTag(nil, 999, protowire.VarintType), 7)

	topLevel := durationpb.New(3)
	topLevel.ProtoReflect().SetUnknown(unknown)

	nested, _ := structpb.NewStruct(map[string]any{"list": []any{1.0, map[string]any{"x": "y"}}})
	inner := nested.Fields["list"].GetListValue().Values[1].GetStructValue().Fields["x"]
	inner.ProtoReflect().SetUnknown(unknown)

	payload, _ := proto.Marshal(durationpb.New(5))
	inAny := &anypb.Any{TypeUrl: "type.googleapis.com/google.protobuf.Duration", Value: append(payload, unknown...)}
	unresolvable := &anypb.Any{TypeUrl: "type.googleapis.com/no.such.Message", Value: payload}

	tests := []struct {
		name string
		m    proto.Message
		msg  string
	}{
		{"unknown fields", topLevel, "google.protobuf.Duration has unknown fields"},
		{"unknown fields nested in a map and a list", nested, `google.protobuf.Struct.fields[list].list_value.values[1].struct_value.fields[x] has unknown fields`},
		{"unknown fields inside an Any", inAny, "google.protobuf.Any(google.protobuf.Duration) has unknown fields"},
		{"Any of an unknown type", unresolvable, `Any type "type.googleapis.com/no.such.Message"`},
		{"nil message", nil, "nil protobuf message"},
		{"typed nil message", (*durationpb.Duration)(nil), "nil protobuf message"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d, err := digest.Proto("/p.S/M", tt.m)
			if !errors.Is(err, digest.ErrUnbindable) {
				t.Fatalf("Proto = %q, %v; want ErrUnbindable", d, err)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not say %q", err, tt.msg)
			}
		})
	}
}

func TestHTTPBinding(t *testing.T) {
	t.Parallel()
	base := func() digest.HTTPRequest {
		return digest.HTTPRequest{
			Procedure:    "refund",
			Method:       "POST",
			Path:         "/orders/42/refund",
			Query:        url.Values{"notify": {"yes"}, "a": {"1", "2"}},
			Header:       http.Header{"Content-Type": {"application/json"}, "X-Tenant": {"acme"}, "X-Region": {"eu"}, "User-Agent": {"agent/1"}},
			BoundHeaders: []string{"X-Tenant", "X-Region"},
			Body:         []byte(`{"amount":150,"currency":"EUR"}`),
		}
	}
	want, err := digest.HTTP(base())
	if err != nil {
		t.Fatal(err)
	}

	same := map[string]func(*digest.HTTPRequest){
		"query built in another order": func(r *digest.HTTPRequest) {
			r.Query = url.Values{}
			r.Query.Add("a", "1")
			r.Query.Add("notify", "yes")
			r.Query.Add("a", "2")
		},
		"bound headers declared in another order and case": func(r *digest.HTTPRequest) { r.BoundHeaders = []string{"x-region", "X-TENANT", "x-tenant"} },
		"unbound header changed":                           func(r *digest.HTTPRequest) { r.Header.Set("User-Agent", "agent/2") },
		"unbound header added":                             func(r *digest.HTTPRequest) { r.Header.Set("X-Request-Id", "abc") },
		"path not clean":                                   func(r *digest.HTTPRequest) { r.Path = "/orders//42/./x/../refund" },
		"path not rooted":                                  func(r *digest.HTTPRequest) { r.Path = "orders/42/refund" },
		"JSON members reordered":                           func(r *digest.HTTPRequest) { r.Body = []byte(` { "currency" : "EUR", "amount" : 1.5e2 } `) },
		"JSON media type with parameters":                  func(r *digest.HTTPRequest) { r.Header.Set("Content-Type", "Application/JSON; charset=utf-8") },
		"JSON suffix media type":                           func(r *digest.HTTPRequest) { r.Header.Set("Content-Type", "application/vnd.api+json") },
	}
	for name, change := range same {
		t.Run("same/"+name, func(t *testing.T) {
			t.Parallel()
			r := base()
			change(&r)
			if got, err := digest.HTTP(r); err != nil || got != want {
				t.Errorf("HTTP = %s, %v; want the unchanged digest %s", got, err, want)
			}
		})
	}

	different := map[string]func(*digest.HTTPRequest){
		"procedure":                func(r *digest.HTTPRequest) { r.Procedure = "refund2" },
		"method":                   func(r *digest.HTTPRequest) { r.Method = "PUT" },
		"method case":              func(r *digest.HTTPRequest) { r.Method = "post" },
		"path":                     func(r *digest.HTTPRequest) { r.Path = "/orders/43/refund" },
		"path trailing slash":      func(r *digest.HTTPRequest) { r.Path = "/orders/42/refund/" },
		"path escaped slash":       func(r *digest.HTTPRequest) { r.Path = "/orders/42%2Frefund" },
		"query value":              func(r *digest.HTTPRequest) { r.Query.Set("notify", "no") },
		"query key added":          func(r *digest.HTTPRequest) { r.Query.Set("dry", "") },
		"query values reordered":   func(r *digest.HTTPRequest) { r.Query["a"] = []string{"2", "1"} },
		"query moved between keys": func(r *digest.HTTPRequest) { r.Query = url.Values{"notify": {"yes", "1", "2"}} },
		"bound header value":       func(r *digest.HTTPRequest) { r.Header.Set("X-Tenant", "other") },
		"bound header repeated":    func(r *digest.HTTPRequest) { r.Header.Add("X-Tenant", "other") },
		"bound header empty":       func(r *digest.HTTPRequest) { r.Header.Set("X-Region", "") },
		"bound header absent":      func(r *digest.HTTPRequest) { r.Header.Del("X-Region") },
		"bound header undeclared":  func(r *digest.HTTPRequest) { r.BoundHeaders = []string{"X-Tenant"} },
		"body":                     func(r *digest.HTTPRequest) { r.Body = []byte(`{"amount":151,"currency":"EUR"}`) },
		"body not JSON-typed":      func(r *digest.HTTPRequest) { r.Header.Set("Content-Type", "text/plain") },
		"body empty":               func(r *digest.HTTPRequest) { r.Body = nil },
	}
	for name, change := range different {
		t.Run("different/"+name, func(t *testing.T) {
			t.Parallel()
			r := base()
			change(&r)
			if got, err := digest.HTTP(r); err != nil || got == want {
				t.Errorf("HTTP = %s, %v; want a digest other than %s", got, err, want)
			}
		})
	}

	t.Run("raw bodies are bound byte for byte", func(t *testing.T) {
		t.Parallel()
		r := base()
		r.Header.Set("Content-Type", "text/plain")
		a, _ := digest.HTTP(r)
		r.Body = []byte(`{"currency":"EUR","amount":150}`)
		if b, _ := digest.HTTP(r); a == b {
			t.Error("reordering a text/plain body kept the digest; raw bodies must not be canonicalized")
		}
	})
	t.Run("empty method means GET", func(t *testing.T) {
		t.Parallel()
		r := digest.HTTPRequest{Procedure: "p", Path: "/"}
		a, _ := digest.HTTP(r)
		r.Method = http.MethodGet
		if b, _ := digest.HTTP(r); a != b {
			t.Error(`Method "" and "GET" bind differently`)
		}
	})
}

func TestProcedureIsBound(t *testing.T) {
	t.Parallel()
	a, _ := digest.JSON("/p.S/A", []byte(`{}`))
	b, _ := digest.JSON("/p.S/B", []byte(`{}`))
	if a == b {
		t.Error("two procedures with the same input share a digest")
	}
	// Field boundaries are unambiguous: moving bytes between procedure and
	// body changes the digest.
	c, _ := digest.JSON("/p.S/M1", []byte(`2`))
	d, _ := digest.JSON("/p.S/M", []byte(`12`))
	if c == d {
		t.Error("length prefixes do not separate procedure and body")
	}
	// The RPC and HTTP forms never collide.
	e, _ := digest.HTTP(digest.HTTPRequest{Procedure: "/p.S/A", Method: "POST", Path: "/", Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{}`)})
	if e == a {
		t.Error("an HTTP request and an RPC input share a digest")
	}
}

func TestKeyed(t *testing.T) {
	t.Parallel()
	d, _ := digest.JSON("/p.S/M", []byte(`{"amount":1}`))
	key := []byte("deployment key")

	mac := hmac.New(sha256.New, key)
	mac.Write(preimage(nil).str("agentsafe.v1.event-digest").str(d))
	want := "hmac-sha256:" + hex.EncodeToString(mac.Sum(nil))
	if got := digest.Keyed(key, d); got != want {
		t.Errorf("Keyed = %s; want %s", got, want)
	}
	if other := digest.Keyed([]byte("another key"), d); other == want {
		t.Error("two keys give the same keyed digest")
	}
	if got := digest.Keyed(nil, d); got != d {
		t.Errorf("Keyed without a key = %s; want the digest unchanged", got)
	}
	if got := digest.Keyed(key, ""); got != "" {
		t.Errorf(`Keyed of "" = %q; want ""`, got)
	}
}

// TestNumbersMustBeExactDoubles checks the SPEC §7 rule that a number is
// refused when its exact decimal value differs from the value of the shortest
// round-trip form of its nearest double: otherwise two different amounts
// would share a digest.
func TestNumbersMustBeExactDoubles(t *testing.T) {
	t.Parallel()
	inexact := func(num, at string) string {
		return "number " + num + " at " + at + " cannot be represented exactly as a double"
	}
	tests := []struct {
		doc string
		msg string // "" when the number is accepted
	}{
		{`{"amount":12345678901234567.1}`, inexact("12345678901234567.1", `"/amount"`)},
		{`{"amount":12345678901234568.9}`, inexact("12345678901234568.9", `"/amount"`)},
		{`{"x":1e-400}`, inexact("1e-400", `"/x"`)},
		{`[-1e-400]`, inexact("-1e-400", `"/0"`)},
		{`0.10000000000000000555`, inexact("0.10000000000000000555", "the top level")},
		{`0.1000000000000000055511151231257827`, inexact("0.1000000000000000055511151231257827", "the top level")},
		{`0.30000000000000001`, inexact("0.30000000000000001", "the top level")},
		{`4.9e-324`, inexact("4.9e-324", "the top level")}, // the double is 5e-324
		{`2.5e-324`, inexact("2.5e-324", "the top level")}, // rounds up to 5e-324
		{`2e-324`, inexact("2e-324", "the top level")},     // rounds down to 0
		{`1e-99999999999`, inexact("1e-99999999999", "the top level")},
		{`0.` + strings.Repeat("1", 100), inexact("0."+strings.Repeat("1", 62)+"…", "the top level")},
		// Integers beyond 2^53−1 keep their own message, overflow included.
		{`1e400`, "number 1e400 at the top level is an integer beyond ±(2^53−1)"},
		{`1.7976931348623157e308`, "number 1.7976931348623157e308 at the top level is an integer beyond ±(2^53−1)"},
		{`9007199254740993`, "is an integer beyond ±(2^53−1)"},

		{`0.1`, ""},
		{`0.10`, ""},
		{`1.0`, ""},
		{`1e0`, ""},
		{`-0`, ""},
		{`-0.0e-400`, ""},
		{`5e-324`, ""},
		{`-5e-324`, ""},
		{`2.2250738585072014e-308`, ""},
		{`1.7976931348623157e307`, "is an integer beyond"}, // exact, but an integer
		{`1.797693134862316e-307`, ""},
		{`1.7976931348623157e-307`, inexact("1.7976931348623157e-307", "the top level")}, // the double is 1.797693134862316e-307
		{`0.30000000000000004`, ""},
		{`3.141592653589793`, ""},
		{`123456789012345.6`, ""},
		{`1e-7`, ""},
		{`0.` + strings.Repeat("0", 400) + `1e401`, ""}, // 1, spelled long
	}
	for _, tt := range tests {
		d, err := digest.JSON("/p.S/M", []byte(tt.doc))
		switch {
		case tt.msg == "" && err != nil:
			t.Errorf("JSON(%s) refused: %v", tt.doc, err)
		case tt.msg == "":
		case !errors.Is(err, digest.ErrUnbindable):
			t.Errorf("JSON(%s) = %q, %v; want ErrUnbindable", tt.doc, d, err)
		case !strings.Contains(err.Error(), tt.msg):
			t.Errorf("JSON(%s): error %q does not say %q", tt.doc, err, tt.msg)
		}
	}
}

// TestDifferentNumbersNeverShareADigest checks pairs of different values that
// rounding to a double would bind alike: at most one of each pair binds.
func TestDifferentNumbersNeverShareADigest(t *testing.T) {
	t.Parallel()
	for _, pair := range [][2]string{
		{`{"amount":12345678901234567.1}`, `{"amount":12345678901234568.9}`},
		{`{"x":0}`, `{"x":1e-400}`},
		{`{"x":0.1}`, `{"x":0.10000000000000000555}`},
		{`{"x":5e-324}`, `{"x":4.9e-324}`},
	} {
		a, errA := digest.JSON("/p.S/M", []byte(pair[0]))
		b, errB := digest.JSON("/p.S/M", []byte(pair[1]))
		if errA == nil && errB == nil && a == b {
			t.Errorf("%s and %s share the digest %s", pair[0], pair[1], a)
		}
	}
}

// TestNestingDeeperThan64IsRefused checks the SPEC §7 depth bound for arrays
// and objects: 64 levels bind, the 65th is refused where it opens.
func TestNestingDeeperThan64IsRefused(t *testing.T) {
	t.Parallel()
	nest := func(open, close string, levels int) string {
		return strings.Repeat(open, levels) + "0" + strings.Repeat(close, levels)
	}
	tests := []struct {
		name, doc, msg string
	}{
		{"arrays at the limit", nest("[", "]", 64), ""},
		{"objects at the limit", nest(`{"a":`, "}", 64), ""},
		{"arrays beyond the limit", nest("[", "]", 65), `nesting deeper than 64 at "/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0"…`},
		{"objects beyond the limit", nest(`{"a":`, "}", 65), `nesting deeper than 64 at "/a/a/a/`},
		{"unclosed", strings.Repeat("[", 1000), "nesting deeper than 64"},
		{"mixed", `{"x":[` + nest(`{"y":`, "}", 62) + `]}`, ""},
		{"mixed beyond the limit", `{"x":[` + nest(`{"y":`, "}", 63) + `]}`, `nesting deeper than 64 at "/x/0/y/y/`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d, err := digest.JSON("/p.S/M", []byte(tt.doc))
			switch {
			case tt.msg == "" && err != nil:
				t.Errorf("JSON refused: %v", err)
			case tt.msg == "":
			case !errors.Is(err, digest.ErrUnbindable):
				t.Errorf("JSON = %q, %v; want ErrUnbindable", d, err)
			case !strings.Contains(err.Error(), tt.msg):
				t.Errorf("error %q does not say %q", err, tt.msg)
			}
		})
	}
}

// TestPreviewDigestIsStableAndTagged: the preview digest is fixed forever
// (approvals stored by one version are resumed by the next), computed here
// independently of the package's writer, and never an input digest.
func TestPreviewDigestIsStableAndTagged(t *testing.T) {
	for state, want := range map[string]string{
		"order 77 v3": "sha256:f90064d41e17bc4853fb239b27d98656accee6e6866a0c67f92117049189fe3a",
		"":            "sha256:7f79bca130664ead072087f60d6ee09daeb47e42a0f7aa306e8e7f91b73f7d01",
	} {
		if got := digest.Preview([]byte(state)); got != want {
			t.Errorf("Preview(%q) = %s, want %s", state, got, want)
		}
	}
	if digest.Preview(nil) != digest.Preview([]byte{}) {
		t.Error("a nil state and an empty one are the same state")
	}
	in, err := digest.JSON("", []byte(`"order 77 v3"`))
	if err != nil || in == digest.Preview([]byte(`"order 77 v3"`)) {
		t.Errorf("a preview digest must never equal an input digest: %s, %v", in, err)
	}
}
