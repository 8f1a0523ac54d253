package grpcadapter

import (
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// absent is the error a hidden call ends with (see adapter.Hidden):
// exactly what grpc-go's server answers for a method of a registered
// service that has no handler — Unimplemented, "unknown method M for
// service S", no metadata.
func absent(fullMethod string) error {
	service, method := "unknown", "unknown"
	name := strings.TrimPrefix(fullMethod, "/")
	if i := strings.LastIndex(name, "/"); i >= 0 {
		service, method = name[:i], name[i+1:]
	}
	return status.Errorf(codes.Unimplemented, "unknown method %v for service %v", method, service)
}
