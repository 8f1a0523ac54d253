package main

import "testing"

// TestRun runs the example end to end: it fails if a call does not come
// back as the example expects.
func TestRun(t *testing.T) {
	if err := run(); err != nil {
		t.Fatal(err)
	}
}
