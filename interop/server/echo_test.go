package main

import (
	"context"
	"math"
	"net/http"
	"testing"
	"time"
)

func TestRequestTimeout(t *testing.T) {
	for _, tc := range []struct {
		name        string
		contentType string
		header      string // the timeout header of the protocol
		value       string
		want        time.Duration
		ok          bool
	}{
		{"connect", "application/proto", "Connect-Timeout-Ms", "200", 200 * time.Millisecond, true},
		{"connect json", "application/json", "Connect-Timeout-Ms", "0", 0, true},
		{"connect none", "application/proto", "", "", 0, false},
		{"connect malformed", "application/proto", "Connect-Timeout-Ms", "2s", 0, false},
		{"connect 11 digits", "application/proto", "Connect-Timeout-Ms", "12345678901", 0, false},
		{"connect ignores grpc-timeout", "application/proto", "Grpc-Timeout", "1S", 0, false},
		{"grpc millis", "application/grpc", "Grpc-Timeout", "200m", 200 * time.Millisecond, true},
		{"grpc-web seconds", "application/grpc-web+proto", "Grpc-Timeout", "3S", 3 * time.Second, true},
		{"grpc hours overflow", "application/grpc+proto", "Grpc-Timeout", "99999999H", time.Duration(math.MaxInt64), true},
		{"grpc nanos", "application/grpc", "Grpc-Timeout", "5n", 5 * time.Nanosecond, true},
		{"grpc bad unit", "application/grpc", "Grpc-Timeout", "5x", 0, false},
		{"grpc 9 digits", "application/grpc", "Grpc-Timeout", "123456789m", 0, false},
		{"grpc ignores connect's", "application/grpc", "Connect-Timeout-Ms", "200", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{"Content-Type": {tc.contentType}}
			if tc.header != "" {
				h.Set(tc.header, tc.value)
			}
			got, ok := requestTimeout(h)
			if got != tc.want || ok != tc.ok {
				t.Errorf("requestTimeout(%s: %q) = %v, %t; want %v, %t", tc.header, tc.value, got, ok, tc.want, tc.ok)
			}
		})
	}
}

// The echo is the client's deadline, never the context's: under agentsafe
// the context carries the attempt's.
func TestClientTimeoutMs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if got := clientTimeoutMs(ctx); got != nil {
		t.Errorf("without a client deadline: echoed %d ms, want none", *got)
	}
	got := clientTimeoutMs(withClientDeadline(ctx, time.Now().Add(200*time.Millisecond)))
	if got == nil || *got > 200 || *got < 150 {
		t.Errorf("with a 200 ms client deadline: echoed %v ms", got)
	}
	got = clientTimeoutMs(withClientDeadline(ctx, time.Now().Add(-time.Second)))
	if got == nil || *got != 0 {
		t.Errorf("with a passed client deadline: echoed %v ms, want 0", got)
	}
}
