package hooks

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"gateway/channels"
	"gateway/internal/childproc/childproctest"
)

// helperHookDir, set in the environment, makes TestHookHelperGateway a stand-in gateway that
// runs the hooks of that folder.
const helperHookDir = "GATEWAY_TEST_HOOK_HELPER_DIR"

// TestHookHelperGateway is not a test: re-run by TestExecHookDiesWithTheGateway in a process
// of its own, it hands a message to the hook folder's program, which never answers, until
// it is killed.
func TestHookHelperGateway(t *testing.T) {
	root := os.Getenv(helperHookDir)
	if root == "" {
		t.Skip("run by TestExecHookDiesWithTheGateway")
	}
	b := newTestBus(t, time.Hour)
	loadOne(t, b, root, DirOptions{})
	b.Receive(ctxT(t), receiveEvent(channels.TextPart("hello")))
}

// A gateway killed with SIGKILL does not leave its hook programs running: each dies with it.
func TestExecHookDiesWithTheGateway(t *testing.T) {
	root := t.TempDir()
	dir := writeHook(t, root, "forever", receiveHook+"timeout: 1h\n", `
echo $$ > hook.pid
exec sleep 600
`)
	kill := childproctest.StartHelper(t, "TestHookHelperGateway", helperHookDir+"="+root)
	pid := childproctest.WaitPID(t, filepath.Join(dir, "hook.pid"))
	if !childproctest.Alive(pid) {
		t.Fatalf("the hook program %d is not running while the gateway waits for it", pid)
	}

	kill()
	childproctest.WaitGone(t, pid, "the hook program of the killed gateway")
}
