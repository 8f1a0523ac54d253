package digest_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/gowebpki/jcs"

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

// FuzzCanonicalMatchesJCS is the differential test SPEC §7 asks of our own
// RFC 8785 implementation. For every input:
//   - what JSON binds is exactly what github.com/gowebpki/jcs produces, and
//     JSON accepts an input exactly when jcs accepts it and it passes an
//     independent statement of the I-JSON checks (referenceIJSON);
//   - what Proto binds for a rendering is exactly what jcs produces, and it
//     accepts whatever jcs accepts within the depth bound;
//   - JSON's digest is the documented pre-image over those canonical bytes.
//
// Normal test runs execute the seed corpus and testdata/fuzz only.
func FuzzCanonicalMatchesJCS(f *testing.F) {
	for _, seed := range seedDocuments(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		want, jcsErr := jcs.Transform(doc)
		depth, refErr := referenceIJSON(doc)

		got, err := digest.Canonical(doc)
		switch {
		case err != nil && !errors.Is(err, digest.ErrUnbindable):
			t.Fatalf("refused %q without ErrUnbindable: %v", doc, err)
		case err == nil && jcsErr != nil:
			t.Fatalf("accepted %q, which jcs refuses: %v", doc, jcsErr)
		case err == nil && refErr != nil:
			t.Fatalf("accepted %q, which is not I-JSON: %v", doc, refErr)
		case err != nil && jcsErr == nil && refErr == nil:
			t.Fatalf("refused %q, which jcs and the I-JSON reference accept: %v", doc, err)
		case err == nil && !bytes.Equal(got, want):
			t.Fatalf("canonical form of %q differs from jcs:\n got  %q\n want %q", doc, got, want)
		}

		d, dErr := digest.JSON("/p.S/M", doc)
		if (dErr == nil) != (err == nil) {
			t.Fatalf("JSON and Canonical disagree on %q: %v, %v", doc, dErr, err)
		}
		if dErr == nil {
			if pre := preimage(nil).str("agentsafe.v1.input-digest").str("/p.S/M").str("rpc").str("json").str(string(got)).digest(); d != pre {
				t.Fatalf("digest of %q is %s; the pre-image over its canonical form gives %s", doc, d, pre)
			}
		}

		rendered, err := digest.CanonicalRendered(doc)
		switch {
		case err != nil && !errors.Is(err, digest.ErrUnbindable):
			t.Fatalf("rendered: refused %q without ErrUnbindable: %v", doc, err)
		case err == nil && jcsErr != nil:
			t.Fatalf("rendered: accepted %q, which jcs refuses: %v", doc, jcsErr)
		case err != nil && jcsErr == nil && depth <= 64:
			t.Fatalf("rendered: refused %q, which jcs accepts: %v", doc, err)
		case err == nil && !bytes.Equal(rendered, want):
			t.Fatalf("rendered: canonical form of %q differs from jcs:\n got  %q\n want %q", doc, rendered, want)
		}
	})
}

// seedDocuments returns the golden vectors' JSON inputs, RFC 8785's
// examples, and documents at the edges of each rule.
func seedDocuments(tb testing.TB) [][]byte {
	raw, err := os.ReadFile(vectorsFile)
	if err != nil {
		tb.Fatal(err)
	}
	var vectors []vector
	if err := json.Unmarshal(raw, &vectors); err != nil {
		tb.Fatal(err)
	}
	var seeds [][]byte
	for _, v := range vectors {
		switch {
		case v.JSON != nil:
			seeds = append(seeds, []byte(*v.JSON))
		case v.HTTP != nil && v.HTTP.Body != "":
			seeds = append(seeds, []byte(v.HTTP.Body))
		case v.Proto != nil:
			seeds = append(seeds, []byte(v.Proto.JSON))
		}
	}
	for _, seed := range []string{
		// RFC 8785 §3.2.2 and Appendix B, and the jcs test inputs.
		`{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}`,
		`{"numbers":[4.50,2e-3,0.000000000000000000000000001,-0,1e21,1e-7,0.000001,123e-20],"literals":[null,true,false]}`,
		`{"\u20ac":"Euro Sign","\r":"Carriage Return","\u000a":"Newline","1":"One","\u0080":"Control\u007f","\ud83d\ude02":"Smiley","\u00f6":"Latin Small Letter O With Diaeresis","\ufb33":"Hebrew Letter Dalet With Dagesh","</script>":"Browser Challenge"}`,
		`{"1":{"f":{"f":"hi","F":5},"\n":56.0},"10":{},"":"empty","a":{},"111":[{"e":"yes","E":"no"}],"A":{}}`,
		`[56,{"d":true,"10":null,"1":[]}]`,
		`{"peach":"This sorting order","péché":"is wrong according to French","pêche":"but canonicalization MUST","sin":"ignore locale"}`,
		`{"Unnormalized Unicode":"A\u030a"}`,
		"  \"this is a test string 1235\"\n",
		// Numbers at the edges of the number rules.
		`[0,-0,0.0,-0.0e-5,1,1.0,1e0,10,1e1,100,1E+2,1000e-1,0.1,0.10,1e-6,1e-7,1e21,1e20,123456789012345678]`,
		`[9007199254740991,-9007199254740991,9007199254740992,9.007199254740991e15,90071992547409910e-1,9007199254740993.0]`,
		`[5e-324,4.9e-324,2.5e-324,2e-324,2.2250738585072014e-308,1.7976931348623157e308,1e400,1e-400,-1e-400]`,
		`[0.30000000000000004,0.30000000000000001,0.10000000000000000555,12345678901234567.1,123456789012345.6,3.141592653589793]`,
		`[1e-99999999999,1E+99999999999,0.00000000000000000000000000000000000000000000000000001e52,1.5e300,1.5e-300]`,
		// Strings and names.
		`"\ud800"`, `"\udc00"`, `"\ud800\u0041"`, `"\ud800\ud800"`, `{"\udfff":1}`, "\"\xff\"", "{\"\xc3\x28\":1}",
		`"\u0000\u0001\b\f\n\r\t\u001f\u007f\u2028\u2029\"\\\/"`, `"\uFFFF\uFDD0\uD83D\uDE00"`,
		`{"a":1,"A":2}`, `{"k":1,"\u212a":2}`, `{"s":1,"\u017f":2}`, `{"é":1,"É":2}`, `{"ß":1,"SS":2}`, `{"a":1,"\u0061":2}`,
		`{"\uff5e":1,"\ud83d\ude00":2,"\ue000":3,"\ud7ff":4,"":5}`,
		`{"aé":1,"aê":2,"a\u00e9b":3,"ab":4}`,
		// Structure.
		`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[0]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`,
		`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[0]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`,
		`[{"b":[{"d":1,"c":2},[{"f":3,"e":4}]],"a":{"z":{},"y":[]}},[{"h":5,"g":6}]]`,
		`{"a":1} {}`, `{"a":1}x`, `[1,]`, `{"a":1,}`, `01`, `-`, `1.`, `.5`, `1e`, `tru`, `nullx`, "\ufeff{}", ``, ` `,
		" [ 1 ,\t2 ,\n3 ,\r4 ] ",
	} {
		seeds = append(seeds, []byte(seed))
	}
	return seeds
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
	for _, size := range []int{1 << 10, 1 << 20} {
		body := benchmarkBody(1024)
		if size > 1024 {
			body = realisticDocument(size)
		}
		b.Run(strconv.Itoa(len(body))+"B", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := digest.JSON("/shop.v1.Orders/Refund", body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkProto measures Proto on a Struct of an ordinary request and of
// many, and reports what it allocates per byte of the protojson rendering:
// protojson's own rendering costs several times that before the streaming
// canonicalization starts.
func BenchmarkProto(b *testing.B) {
	for _, input := range []struct {
		name string
		doc  []byte
	}{{"1KiB", benchmarkBody(1024)}, {"1MiB", realisticDocument(1 << 20)}} {
		doc := input.doc
		var v any
		if err := json.Unmarshal(doc, &v); err != nil {
			b.Fatal(err)
		}
		value, err := structpb.NewValue(v)
		if err != nil {
			b.Fatal(err)
		}
		m := &structpb.Struct{Fields: map[string]*structpb.Value{"input": value}}
		rendered, err := protojson.Marshal(m)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(input.name, func(b *testing.B) {
			b.SetBytes(int64(len(rendered)))
			b.ReportAllocs()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for b.Loop() {
				if _, err := digest.Proto("/shop.v1.Orders/Refund", m); err != nil {
					b.Fatal(err)
				}
			}
			runtime.ReadMemStats(&after)
			perOp := float64(after.TotalAlloc-before.TotalAlloc) / float64(b.N)
			b.ReportMetric(perOp/float64(len(rendered)), "alloc/rendered-byte")
			b.ReportMetric(perOp/float64(proto.Size(m)), "alloc/binary-byte")
		})
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
