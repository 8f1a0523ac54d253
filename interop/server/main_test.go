package main

import (
	"testing"

	"github.com/agentsafe/agentsafe/internal/testenv"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testenv.IgnoreIdleSinkWorkers())
}
