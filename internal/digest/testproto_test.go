package digest_test

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/agentsafe/agentsafe/internal/digest"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
)

// The test service's messages are not in the golden vectors: their schema
// belongs to the adapter tests and may change, which changes digests by
// design. These tests check properties instead.

func TestProtoTestService(t *testing.T) {
	t.Parallel()
	const procedure = "/agentsafe.test.v1.TestService/Write"
	req := &testv1.Request{Id: "r1", Amount: 9007199254740993, FailTimes: 2, Sleep: durationpb.New(1500000000)}

	d, err := digest.Proto(procedure, req)
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := protojson.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if fromJSON, err := digest.JSON(procedure, rendered); err != nil || fromJSON != d {
		t.Errorf("JSON of the protojson rendering = %s, %v; want Proto's %s", fromJSON, err, d)
	}
	// The same request from a client that spelled it differently: proto
	// field names, another member order, Duration written another way.
	var parsed testv1.Request
	if err := protojson.Unmarshal([]byte(`{"sleep":"1.500s","fail_times":2,"amount":"9007199254740993","id":"r1"}`), &parsed); err != nil {
		t.Fatal(err)
	}
	if again, err := digest.Proto(procedure, &parsed); err != nil || again != d {
		t.Errorf("Proto of the same request parsed from JSON = %s, %v; want %s", again, err, d)
	}

	changed := proto.Clone(req).(*testv1.Request)
	changed.Amount++
	if other, _ := digest.Proto(procedure, changed); other == d {
		t.Error("an int64 beyond 2^53 changed by one kept the digest")
	}

	withUnknown := proto.Clone(req).(*testv1.Request)
	withUnknown.Sleep.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1))
	_, err = digest.Proto(procedure, withUnknown)
	if !errors.Is(err, digest.ErrUnbindable) || !strings.Contains(err.Error(), "agentsafe.test.v1.Request.sleep has unknown fields") {
		t.Errorf("Proto with unknown fields in a nested message: err = %v; want ErrUnbindable naming agentsafe.test.v1.Request.sleep", err)
	}
}
