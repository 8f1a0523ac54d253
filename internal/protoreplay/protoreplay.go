// Package protoreplay finds the response type of an RPC procedure, for the
// adapters whose frameworks do not hand it to an interceptor (gRPC, Twirp):
// a stored response is decoded into a new message of that type to be
// replayed.
package protoreplay

import (
	"strings"
	"sync"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"
)

var outputs sync.Map // procedure → protoreflect.MessageType, or nil when unknown

// Output returns the type of the response of procedure
// ("/package.Service/Method"), as the linked generated code registered it
// (protoregistry.GlobalTypes), or a dynamic type when only its descriptor
// is linked; false when the procedure is not in protoregistry.GlobalFiles.
func Output(procedure string) (protoreflect.MessageType, bool) {
	if v, ok := outputs.Load(procedure); ok {
		mt, _ := v.(protoreflect.MessageType)
		return mt, mt != nil
	}
	mt := find(procedure)
	outputs.Store(procedure, mt)
	return mt, mt != nil
}

func find(procedure string) protoreflect.MessageType {
	svc, method, ok := strings.Cut(strings.TrimPrefix(procedure, "/"), "/")
	if !ok {
		return nil
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return nil
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil
	}
	md := sd.Methods().ByName(protoreflect.Name(method))
	if md == nil {
		return nil
	}
	if mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName()); err == nil {
		return mt
	}
	return dynamicpb.NewMessageType(md.Output())
}
