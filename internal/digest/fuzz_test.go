package digest_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/agentsafe/agentsafe/internal/digest"
)

// FuzzJSON checks that JSON is deterministic, refuses only with
// ErrUnbindable, and that any accepted document re-encoded differently
// (members in reverse order, other string escapes, other whitespace) keeps
// its digest. Normal test runs execute the seed corpus only.
func FuzzJSON(f *testing.F) {
	raw, err := os.ReadFile(vectorsFile)
	if err != nil {
		f.Fatal(err)
	}
	var vectors []vector
	if err := json.Unmarshal(raw, &vectors); err != nil {
		f.Fatal(err)
	}
	for _, v := range vectors {
		if v.JSON != nil {
			f.Add([]byte(*v.JSON))
		}
	}
	for _, seed := range []string{
		`{"a":1,"A":2}`, `{"n":9007199254740992}`, "\"\xff\"", `"\ud800"`, `{"a":1}x`,
		`{"<tag>":"a&b","\u2028":"\u2029","z":[1e-7,-0,0.5,1E3]}`,
	} {
		f.Add([]byte(seed))
	}

	f.Fuzz(func(t *testing.T, doc []byte) {
		d1, err1 := digest.JSON("/p.S/M", doc)
		d2, err2 := digest.JSON("/p.S/M", doc)
		if d1 != d2 || (err1 == nil) != (err2 == nil) {
			t.Fatalf("not deterministic: %q, %v then %q, %v", d1, err1, d2, err2)
		}
		if err1 != nil {
			if !errors.Is(err1, digest.ErrUnbindable) {
				t.Fatalf("refused without ErrUnbindable: %v", err1)
			}
			return
		}
		if !digestForm.MatchString(d1) {
			t.Fatalf("malformed digest %q", d1)
		}
		var v any
		dec := json.NewDecoder(bytes.NewReader(doc))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("accepted a document encoding/json cannot decode: %v", err)
		}
		var b strings.Builder
		reencode(&b, v)
		d3, err := digest.JSON("/p.S/M", []byte(b.String()))
		if err != nil || d3 != d1 {
			t.Fatalf("re-encoding changed the digest:\n %q -> %s\n %q -> %s, %v", doc, d1, b.String(), d3, err)
		}
	})
}

// reencode writes v as JSON with object members in reverse byte order,
// encoding/json's string escapes (\u003c for <, \u2028, ...), and spaces.
func reencode(b *strings.Builder, v any) {
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		slices.Reverse(keys)
		b.WriteString("{ ")
		for i, k := range keys {
			if i > 0 {
				b.WriteString(" , ")
			}
			reencode(b, k)
			b.WriteString(" : ")
			reencode(b, v[k])
		}
		b.WriteString(" }")
	case []any:
		b.WriteString("[ ")
		for i, e := range v {
			if i > 0 {
				b.WriteString(" , ")
			}
			reencode(b, e)
		}
		b.WriteString(" ]")
	default: // string, json.Number, bool, nil
		out, err := json.Marshal(v)
		if err != nil {
			panic(err)
		}
		b.Write(out)
	}
}

func BenchmarkJSON(b *testing.B) {
	body := benchmarkBody(1024)
	if len(body) != 1024 {
		b.Fatalf("benchmark body is %d bytes; want 1024", len(body))
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := digest.JSON("/shop.v1.Orders/Refund", body); err != nil {
			b.Fatal(err)
		}
	}
}

// benchmarkBody returns a realistic JSON request of exactly size bytes:
// nested objects, an array, numbers and strings, padded in a note field.
func benchmarkBody(size int) []byte {
	items := make([]map[string]any, 6)
	for i := range items {
		items[i] = map[string]any{"sku": "SKU-000" + string(rune('0'+i)), "quantity": i + 1, "unitPrice": 19.99 + float64(i), "tags": []string{"gift", "fragile"}}
	}
	req := map[string]any{
		"orderId":  "ord_8f14e45fceea167a5a36dedd4bea2543",
		"customer": map[string]any{"id": "cus_42", "email": "ada@example.com", "name": "Ada Lovelace", "vip": true},
		"items":    items,
		"amount":   map[string]any{"value": 12345, "currency": "EUR"},
		"reason":   "requested_by_customer",
		"note":     "",
	}
	out, err := json.Marshal(req)
	if err != nil {
		panic(err)
	}
	if pad := size - len(out); pad > 0 {
		req["note"] = strings.Repeat("x", pad)
		out, _ = json.Marshal(req)
	}
	return out
}
