package replay_test

import (
	"bytes"
	"net/http"
	"reflect"
	"testing"

	"github.com/agentsafe/agentsafe/internal/replay"
)

func TestHTTPRoundTripDropsHopByHopAndDate(t *testing.T) {
	h := http.Header{
		"Content-Type":      {"application/json"},
		"X-Multi":           {"a", "b"},
		"Date":              {"Thu, 03 Dec 2026 10:00:00 GMT"},
		"Connection":        {"keep-alive, X-Hop"},
		"X-Hop":             {"per connection"},
		"Transfer-Encoding": {"chunked"},
		"Keep-Alive":        {"timeout=5"},
	}
	b := replay.EncodeHTTP(201, h, []byte(`{"id":1}`))
	status, got, body, err := replay.DecodeHTTP(b)
	if err != nil {
		t.Fatal(err)
	}
	want := http.Header{"Content-Type": {"application/json"}, "X-Multi": {"a", "b"}}
	if status != 201 || !reflect.DeepEqual(got, want) || !bytes.Equal(body, []byte(`{"id":1}`)) {
		t.Errorf("the stored response keeps status, end-to-end headers and body only: %d %v %q", status, got, body)
	}
	if !bytes.Equal(b, replay.EncodeHTTP(201, h.Clone(), []byte(`{"id":1}`))) {
		t.Error("one response must always encode the same")
	}
}

func TestDecodeHTTPRefusesGarbage(t *testing.T) {
	for _, b := range [][]byte{nil, {0}, {1}, {1, 0xff, 0xff, 0xff}, {1, 200, 1, 5, 'a'}} {
		if _, _, _, err := replay.DecodeHTTP(b); err == nil {
			t.Errorf("DecodeHTTP(%v) must fail", b)
		}
	}
}
