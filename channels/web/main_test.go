package web_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every socket handler, pinger, tab and browser a test starts must have ended when the
// package's tests are done.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
