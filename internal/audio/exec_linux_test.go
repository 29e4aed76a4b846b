package audio_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"gateway/internal/audio"
	"gateway/internal/childproc/childproctest"
)

// helperPIDFile, set in the environment, makes TestToolHelperGateway a stand-in gateway that
// runs a tool which writes its pid there and never ends.
const helperPIDFile = "GATEWAY_TEST_TOOL_HELPER_PIDFILE"

// TestToolHelperGateway is not a test: re-run by TestToolDiesWithTheGateway in a process of
// its own, it runs a tool that never ends, until it is killed.
func TestToolHelperGateway(t *testing.T) {
	pidFile := os.Getenv(helperPIDFile)
	if pidFile == "" {
		t.Skip("run by TestToolDiesWithTheGateway")
	}
	_, _ = audio.Run(context.Background(), audio.Cmd{
		Argv:    []string{"/bin/sh", "-c", `echo $$ > "$0.tmp" && mv "$0.tmp" "$0" && exec sleep 600`, pidFile},
		Timeout: time.Hour,
	})
}

// A gateway killed with SIGKILL does not leave an audio tool running (an STT or TTS command,
// ffmpeg): it dies with the gateway.
func TestToolDiesWithTheGateway(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "tool.pid")
	kill := childproctest.StartHelper(t, "TestToolHelperGateway", helperPIDFile+"="+pidFile)
	pid := childproctest.WaitPID(t, pidFile)
	if !childproctest.Alive(pid) {
		t.Fatalf("the tool %d is not running while the gateway waits for it", pid)
	}

	kill()
	childproctest.WaitGone(t, pid, "the tool of the killed gateway")
}
