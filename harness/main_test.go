package harness

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine a test starts must have ended when the package's tests are done.
func TestMain(m *testing.M) {
	if os.Getenv(decodeDepthEnv) == "1" {
		os.Exit(decodeDepthChild())
	}
	goleak.VerifyTestMain(m)
}
