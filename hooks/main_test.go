package hooks

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine a test starts must have ended when the package's tests are done.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
