package main

import (
	"context"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	conformancev1 "github.com/agentsafe/agentsafe/interop/internal/gen/connectrpc/conformance/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// What both servers echo back: the request info of a ConformancePayload
// (or of an error detail), built the same way for connect-go and grpc-go.

// clientDeadlineKey holds the deadline the client asked for, recorded
// before any interceptor runs (see withClientDeadline).
type clientDeadlineKey struct{}

// withClientDeadline records the deadline the client sent with the call.
//
// The suite asks the server to echo the timeout it received. A handler's
// context deadline is not that value under agentsafe: the engine gives each
// attempt its own deadline (the capability's Timeout, 30s here), so a call
// without a timeout would echo 30000 ms. That is the engine working as
// specified, not a protocol break, so the harness records the client's
// deadline on the way in and echoes that instead, with or without agentsafe.
func withClientDeadline(ctx context.Context, deadline time.Time) context.Context {
	return context.WithValue(ctx, clientDeadlineKey{}, deadline)
}

// clientTimeoutMs is the client's remaining timeout in milliseconds, or nil
// if the client sent none: what RequestInfo.timeout_ms echoes.
func clientTimeoutMs(ctx context.Context) *int64 {
	deadline, ok := ctx.Value(clientDeadlineKey{}).(time.Time)
	if !ok {
		return nil
	}
	return proto.Int64(max(time.Until(deadline), 0).Milliseconds())
}

// requestTimeout parses the timeout a request carries in its header:
// Connect-Timeout-Ms for the Connect protocol, grpc-timeout for gRPC and
// gRPC-Web. A malformed value counts as absent; the framework rejects it.
func requestTimeout(h http.Header) (time.Duration, bool) {
	if strings.HasPrefix(h.Get("Content-Type"), "application/grpc") {
		return parseGRPCTimeout(h.Get("Grpc-Timeout"))
	}
	v := h.Get("Connect-Timeout-Ms")
	if v == "" || len(v) > 10 {
		return 0, false
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms < 0 {
		return 0, false
	}
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return time.Duration(math.MaxInt64), true
	}
	return time.Duration(ms) * time.Millisecond, true
}

// parseGRPCTimeout parses a grpc-timeout value: at most 8 digits and a unit.
func parseGRPCTimeout(v string) (time.Duration, bool) {
	if len(v) < 2 || len(v) > 9 {
		return 0, false
	}
	n, err := strconv.ParseInt(v[:len(v)-1], 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	unit := map[byte]time.Duration{
		'H': time.Hour, 'M': time.Minute, 'S': time.Second,
		'm': time.Millisecond, 'u': time.Microsecond, 'n': time.Nanosecond,
	}[v[len(v)-1]]
	if unit == 0 {
		return 0, false
	}
	if n > math.MaxInt64/int64(unit) {
		return time.Duration(math.MaxInt64), true
	}
	return time.Duration(n) * unit, true
}

// requestInfo is what the server observed about the call.
func requestInfo(ctx context.Context, headers []*conformancev1.Header, query map[string][]string, reqs []*anypb.Any) *conformancev1.ConformancePayload_RequestInfo {
	info := &conformancev1.ConformancePayload_RequestInfo{
		RequestHeaders: headers,
		Requests:       reqs,
		TimeoutMs:      clientTimeoutMs(ctx),
	}
	if len(query) > 0 {
		info.ConnectGetInfo = &conformancev1.ConformancePayload_ConnectGetInfo{QueryParams: protoHeaders(query)}
	}
	return info
}

// protoHeaders converts HTTP headers or query parameters, sorted by name.
func protoHeaders(src map[string][]string) []*conformancev1.Header {
	out := make([]*conformancev1.Header, 0, len(src))
	for _, name := range slices.Sorted(maps.Keys(src)) {
		out = append(out, &conformancev1.Header{Name: name, Value: slices.Clone(src[name])})
	}
	return out
}

// addHeaders adds every header value of src to dst.
func addHeaders(src []*conformancev1.Header, dst http.Header) {
	for _, h := range src {
		for _, v := range h.Value {
			dst.Add(h.Name, v)
		}
	}
}

// errorDetails returns the details a response definition's error carries,
// followed by extra. It copies: the request message is never modified, so
// a retried attempt sees the request as the client sent it.
func errorDetails(e *conformancev1.Error, extra ...*anypb.Any) []*anypb.Any {
	return append(slices.Clone(e.GetDetails()), extra...)
}
