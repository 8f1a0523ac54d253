package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"connectrpc.com/connect"
	conformancev1 "github.com/agentsafe/agentsafe/interop/internal/gen/connectrpc/conformance/v1"
	"github.com/agentsafe/agentsafe/interop/internal/gen/connectrpc/conformance/v1/conformancev1connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// connectService implements the ConformanceService with connect-go, as the
// suite's reference server does (docs/testing_servers.md and the service's
// proto comments). Unimplemented is left to the embedded type, so the
// framework answers it.
type connectService struct {
	conformancev1connect.UnimplementedConformanceServiceHandler
	delay delay
}

func (s connectService) Unary(ctx context.Context, req *connect.Request[conformancev1.UnaryRequest]) (*connect.Response[conformancev1.UnaryResponse], error) {
	return connectUnary(ctx, s.delay, req, func(p *conformancev1.ConformancePayload) *conformancev1.UnaryResponse {
		return &conformancev1.UnaryResponse{Payload: p}
	})
}

func (s connectService) IdempotentUnary(ctx context.Context, req *connect.Request[conformancev1.IdempotentUnaryRequest]) (*connect.Response[conformancev1.IdempotentUnaryResponse], error) {
	return connectUnary(ctx, s.delay, req, func(p *conformancev1.ConformancePayload) *conformancev1.IdempotentUnaryResponse {
		return &conformancev1.IdempotentUnaryResponse{Payload: p}
	})
}

// unaryRequest is what Unary and IdempotentUnary requests share.
type unaryRequest[T any] interface {
	*T
	proto.Message
	GetResponseDefinition() *conformancev1.UnaryResponseDefinition
}

func connectUnary[Req, Res any, R unaryRequest[Req]](ctx context.Context, d delay, req *connect.Request[Req], wrap func(*conformancev1.ConformancePayload) *Res) (*connect.Response[Res], error) {
	msg := R(req.Msg)
	reqAny, err := asAny(msg)
	if err != nil {
		return nil, err
	}
	def := msg.GetResponseDefinition()
	payload, cerr := connectUnaryOutcome(ctx, def, req.Header(), req.Peer().Query, []*anypb.Any{reqAny})
	if cerr != nil {
		return nil, cerr
	}
	res := connect.NewResponse(wrap(payload))
	if def != nil {
		addHeaders(def.GetResponseHeaders(), res.Header())
		addHeaders(def.GetResponseTrailers(), res.Trailer())
		if err := d.wait(ctx, def.GetResponseDelayMs()); err != nil {
			return nil, err
		}
	}
	return res, nil
}

func (s connectService) ClientStream(ctx context.Context, stream *connect.ClientStream[conformancev1.ClientStreamRequest]) (*connect.Response[conformancev1.ClientStreamResponse], error) {
	var def *conformancev1.UnaryResponseDefinition
	var reqs []*anypb.Any
	first := true
	for stream.Receive() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		msg := stream.Msg()
		if first {
			// Only the first message's definition counts.
			def, first = msg.GetResponseDefinition(), false
		}
		reqAny, err := asAny(msg)
		if err != nil {
			return nil, err
		}
		reqs = append(reqs, reqAny)
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	payload, cerr := connectUnaryOutcome(ctx, def, stream.RequestHeader(), stream.Peer().Query, reqs)
	if cerr != nil {
		return nil, cerr
	}
	res := connect.NewResponse(&conformancev1.ClientStreamResponse{Payload: payload})
	if def != nil {
		addHeaders(def.GetResponseHeaders(), res.Header())
		addHeaders(def.GetResponseTrailers(), res.Trailer())
		if err := s.delay.wait(ctx, def.GetResponseDelayMs()); err != nil {
			return nil, err
		}
	}
	return res, nil
}

func (s connectService) ServerStream(ctx context.Context, req *connect.Request[conformancev1.ServerStreamRequest], stream *connect.ServerStream[conformancev1.ServerStreamResponse]) error {
	reqAny, err := asAny(req.Msg)
	if err != nil {
		return err
	}
	def := req.Msg.GetResponseDefinition()
	if def == nil {
		return nil
	}
	addHeaders(def.GetResponseHeaders(), stream.ResponseHeader())
	addHeaders(def.GetResponseTrailers(), stream.ResponseTrailer())
	if len(def.GetResponseData()) > 0 {
		// Send the headers now, so that the client can read them before
		// the first message.
		if err := stream.Send(nil); err != nil {
			return connect.NewError(connect.CodeInternal, fmt.Errorf("error sending on stream: %w", err))
		}
	}
	sent := 0
	for _, data := range def.GetResponseData() {
		res := &conformancev1.ServerStreamResponse{Payload: &conformancev1.ConformancePayload{Data: data}}
		if sent == 0 {
			res.Payload.RequestInfo = requestInfo(ctx, protoHeaders(req.Header()), req.Peer().Query, []*anypb.Any{reqAny})
		}
		if err := s.delay.wait(ctx, def.GetResponseDelayMs()); err != nil {
			return err
		}
		if err := stream.Send(res); err != nil {
			return connect.NewError(connect.CodeInternal, fmt.Errorf("error sending on stream: %w", err))
		}
		sent++
	}
	if def.GetError() == nil {
		return nil
	}
	var extra []*anypb.Any
	if sent == 0 {
		info, err := anypb.New(requestInfo(ctx, protoHeaders(req.Header()), req.Peer().Query, []*anypb.Any{reqAny}))
		if err != nil {
			return connect.NewError(connect.CodeInternal, err)
		}
		extra = append(extra, info)
	}
	return connectError(def.GetError(), extra...)
}

func (s connectService) BidiStream(ctx context.Context, stream *connect.BidiStream[conformancev1.BidiStreamRequest, conformancev1.BidiStreamResponse]) error {
	var def *conformancev1.StreamResponseDefinition
	var reqs []*anypb.Any
	fullDuplex, first, sent := false, true, 0
	info := func() *conformancev1.ConformancePayload_RequestInfo {
		return requestInfo(ctx, protoHeaders(stream.RequestHeader()), stream.Peer().Query, reqs)
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		msg, err := stream.Receive()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("receive request: %w", err)
		}
		reqAny, err := asAny(msg)
		if err != nil {
			return err
		}
		reqs = append(reqs, reqAny)
		if first {
			def, fullDuplex, first = msg.GetResponseDefinition(), msg.GetFullDuplex(), false
			if def != nil {
				addHeaders(def.GetResponseHeaders(), stream.ResponseHeader())
				addHeaders(def.GetResponseTrailers(), stream.ResponseTrailer())
				// Only a full-duplex call may send headers before the
				// client has finished sending.
				if fullDuplex && len(def.GetResponseData()) > 0 {
					if err := stream.Send(nil); err != nil {
						return connect.NewError(connect.CodeInternal, fmt.Errorf("error sending on stream: %w", err))
					}
				}
			}
		}
		if !fullDuplex {
			continue
		}
		if sent >= len(def.GetResponseData()) {
			break // nothing left to send: end with the error, if any
		}
		res := &conformancev1.BidiStreamResponse{Payload: &conformancev1.ConformancePayload{Data: def.GetResponseData()[sent]}}
		if sent == 0 {
			res.Payload.RequestInfo = info()
		} else {
			res.Payload.RequestInfo = &conformancev1.ConformancePayload_RequestInfo{Requests: reqs}
		}
		if err := s.delay.wait(ctx, def.GetResponseDelayMs()); err != nil {
			return err
		}
		if err := stream.Send(res); err != nil {
			return connect.NewError(connect.CodeInternal, fmt.Errorf("error sending on stream: %w", err))
		}
		sent++
		reqs = nil
	}
	if !fullDuplex && len(def.GetResponseData()) > 0 {
		// The upload is complete: the headers may go now.
		if err := stream.Send(nil); err != nil {
			return connect.NewError(connect.CodeInternal, fmt.Errorf("error sending on stream: %w", err))
		}
	}
	if def == nil {
		return nil
	}
	for ; sent < len(def.GetResponseData()); sent++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		res := &conformancev1.BidiStreamResponse{Payload: &conformancev1.ConformancePayload{Data: def.GetResponseData()[sent]}}
		if sent == 0 {
			res.Payload.RequestInfo = info()
		}
		if err := s.delay.wait(ctx, def.GetResponseDelayMs()); err != nil {
			return err
		}
		if err := stream.Send(res); err != nil {
			return connect.NewError(connect.CodeInternal, fmt.Errorf("error sending on stream: %w", err))
		}
	}
	if def.GetError() == nil {
		return nil
	}
	var extra []*anypb.Any
	if sent == 0 {
		infoAny, err := anypb.New(info())
		if err != nil {
			return connect.NewError(connect.CodeInternal, err)
		}
		extra = append(extra, infoAny)
	}
	return connectError(def.GetError(), extra...)
}

// connectUnaryOutcome is the payload or the error a unary-style response
// definition asks for. An error carries the request info as its last
// detail, and the definition's headers and trailers as its metadata:
// connect-go has no way to set them apart on a unary error.
func connectUnaryOutcome(ctx context.Context, def *conformancev1.UnaryResponseDefinition, header map[string][]string, query map[string][]string, reqs []*anypb.Any) (*conformancev1.ConformancePayload, *connect.Error) {
	info := requestInfo(ctx, protoHeaders(header), query, reqs)
	switch r := def.GetResponse().(type) {
	case *conformancev1.UnaryResponseDefinition_Error:
		infoAny, err := anypb.New(info)
		if err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
		cerr := connectError(r.Error, infoAny)
		addHeaders(def.GetResponseHeaders(), cerr.Meta())
		addHeaders(def.GetResponseTrailers(), cerr.Meta())
		return nil, cerr
	case *conformancev1.UnaryResponseDefinition_ResponseData:
		return &conformancev1.ConformancePayload{RequestInfo: info, Data: r.ResponseData}, nil
	case nil:
		return &conformancev1.ConformancePayload{RequestInfo: info}, nil
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("provided UnaryRequest.Response has an unexpected type %T", r))
	}
}

// connectError is the *connect.Error a definition's Error describes, with
// extra details after its own.
func connectError(e *conformancev1.Error, extra ...*anypb.Any) *connect.Error {
	cerr := connect.NewError(connect.Code(e.GetCode()), errors.New(e.GetMessage()))
	for _, d := range errorDetails(e, extra...) {
		detail, err := connect.NewErrorDetail(d)
		if err != nil {
			return connect.NewError(connect.CodeInternal, err)
		}
		cerr.AddDetail(detail)
	}
	return cerr
}

func asAny(msg proto.Message) (*anypb.Any, error) {
	a, err := anypb.New(msg)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("unable to convert message: %w", err))
	}
	return a, nil
}
