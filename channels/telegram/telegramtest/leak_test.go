package telegramtest

import (
	"testing"

	"go.uber.org/goleak"
)

// The fake starts goroutines (its HTTP server, the webhook pusher, long polls); Close ends them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
