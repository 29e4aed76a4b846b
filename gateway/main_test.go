package gateway

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine a test starts must have ended when the package's tests are done. Run with
// GATEWAY_TEST_MCP=stdio, the test binary is instead an MCP server on stdin/stdout (see
// mcp_test.go).
func TestMain(m *testing.M) {
	if os.Getenv("GATEWAY_TEST_MCP") == "stdio" {
		os.Exit(serveMCPStdio())
	}
	goleak.VerifyTestMain(m)
}
