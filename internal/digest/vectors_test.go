package digest_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"unicode"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	_ "google.golang.org/protobuf/types/known/anypb"      // vectors name these types
	_ "google.golang.org/protobuf/types/known/durationpb" //
	_ "google.golang.org/protobuf/types/known/structpb"   //
	_ "google.golang.org/protobuf/types/known/wrapperspb" //

	"github.com/agentsafe/agentsafe/internal/digest"
)

var update = flag.Bool("update", false, "rewrite testdata/vectors.json with the digests computed now")

const vectorsFile = "testdata/vectors.json"

// vector is one golden digest. Exactly one of JSON, Proto and HTTP is set.
type vector struct {
	Name      string       `json:"name"`
	Procedure string       `json:"procedure"`
	JSON      *string      `json:"json,omitempty"`
	Proto     *protoInput  `json:"proto,omitempty"`
	HTTP      *httpRequest `json:"http,omitempty"`
	// SameAs and DiffersFrom name another vector whose digest must be equal
	// to, or different from, this one's.
	SameAs      string `json:"sameAs,omitempty"`
	DiffersFrom string `json:"differsFrom,omitempty"`
	Digest      string `json:"digest,omitempty"`
	// Refused is set instead of Digest for an input that no longer binds,
	// to what the refusal must say. Such an input never binds again, so no
	// approval can be resumed with it.
	Refused string `json:"refused,omitempty"`
}

type protoInput struct {
	Type string `json:"type"` // full name of a message linked into the test
	JSON string `json:"json"` // its protojson form
}

type httpRequest struct {
	Method string              `json:"method"`
	Path   string              `json:"path"`
	Query  string              `json:"query,omitempty"`
	Header map[string][]string `json:"header,omitempty"`
	Bound  []string            `json:"bound,omitempty"`
	Body   string              `json:"body,omitempty"`
}

func (v vector) compute() (string, error) {
	switch {
	case v.JSON != nil:
		return digest.JSON(v.Procedure, []byte(*v.JSON))
	case v.Proto != nil:
		mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(v.Proto.Type))
		if err != nil {
			return "", err
		}
		m := mt.New().Interface()
		if err := protojson.Unmarshal([]byte(v.Proto.JSON), m); err != nil {
			return "", err
		}
		return digest.Proto(v.Procedure, m)
	case v.HTTP != nil:
		q, err := url.ParseQuery(v.HTTP.Query)
		if err != nil {
			return "", err
		}
		h := http.Header{}
		for k, vs := range v.HTTP.Header {
			for _, s := range vs {
				h.Add(k, s)
			}
		}
		return digest.HTTP(digest.HTTPRequest{
			Procedure:    v.Procedure,
			Method:       v.HTTP.Method,
			Path:         v.HTTP.Path,
			Query:        q,
			Header:       h,
			BoundHeaders: v.HTTP.Bound,
			Body:         []byte(v.HTTP.Body),
		})
	}
	return "", fmt.Errorf("vector %q has no input", v.Name)
}

// TestVectors recomputes every golden digest. A failure means digests
// changed: every pending approval in every deployment would stop matching
// its resume. Never regenerate the file to make this pass unless the format
// change is deliberate and versioned (a new domain tag).
func TestVectors(t *testing.T) {
	raw, err := os.ReadFile(vectorsFile)
	if err != nil {
		t.Fatal(err)
	}
	var vectors []vector
	if err := json.Unmarshal(raw, &vectors); err != nil {
		t.Fatal(err)
	}
	byName := make(map[string]string)
	for i := range vectors {
		v := &vectors[i]
		got, err := v.compute()
		if v.Refused != "" {
			if !errors.Is(err, digest.ErrUnbindable) || !strings.Contains(err.Error(), v.Refused) {
				t.Errorf("%s: got %s, %v; want ErrUnbindable saying %q", v.Name, got, err, v.Refused)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", v.Name, err)
			continue
		}
		if _, dup := byName[v.Name]; dup {
			t.Errorf("two vectors named %q", v.Name)
		}
		byName[v.Name] = got
		if *update {
			v.Digest = got
		} else if got != v.Digest {
			t.Errorf("%s: digest drifted:\n got  %s\n want %s", v.Name, got, v.Digest)
		}
	}
	for _, v := range vectors {
		if other, ok := byName[v.SameAs]; v.SameAs != "" && (!ok || other != byName[v.Name]) {
			t.Errorf("%s: digest differs from %q; they must be equal", v.Name, v.SameAs)
		}
		if other, ok := byName[v.DiffersFrom]; v.DiffersFrom != "" && (!ok || other == byName[v.Name]) {
			t.Errorf("%s: digest equals %q; they must differ", v.Name, v.DiffersFrom)
		}
	}
	if *update && !t.Failed() {
		writeVectors(t, vectors)
	}
}

// writeVectors writes one vector per line, with combining marks escaped so
// that the NFC and NFD vectors read differently.
func writeVectors(t *testing.T, vectors []vector) {
	var b bytes.Buffer
	b.WriteString("[\n")
	for i, v := range vectors {
		var line bytes.Buffer
		enc := json.NewEncoder(&line)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
		b.WriteString("  ")
		for _, r := range strings.TrimSuffix(line.String(), "\n") {
			if unicode.Is(unicode.Mn, r) {
				fmt.Fprintf(&b, "\\u%04x", r)
			} else {
				b.WriteRune(r)
			}
		}
		if i < len(vectors)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString("]\n")
	if err := os.WriteFile(vectorsFile, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
