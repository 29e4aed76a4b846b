package tts_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Programs, timers and servers started by a test end with it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
