package orders

import (
	"encoding/json"
	"slices"
	"sync"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Attempt is one run of a handler, as the service saw it.
type Attempt struct {
	Procedure      string
	ExecutionID    string
	IdempotencyKey string
	Attempt        int
	What           string
}

// Log keeps the attempts the service ran.
type Log struct {
	mu       sync.Mutex
	attempts []Attempt
}

// Add records one attempt.
func (l *Log) Add(a Attempt) {
	l.mu.Lock()
	l.attempts = append(l.attempts, a)
	l.mu.Unlock()
}

// Of returns the attempts of one execution.
func (l *Log) Of(executionID string) []Attempt {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(l.attempts), func(a Attempt) bool { return a.ExecutionID != executionID })
}

// All returns every attempt, in order.
func (l *Log) All() []Attempt {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.attempts)
}

func unmarshal(b []byte, m proto.Message) error {
	if !json.Valid(b) {
		return protojson.Unmarshal(b, m) // let protojson name the problem
	}
	return protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(b, m)
}
