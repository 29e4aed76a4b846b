//go:build unix

// Package childproctest helps tests see whether the programs a gateway started are still
// running.
package childproctest

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Alive is false for a process that is gone or a zombie nobody reaped yet.
func Alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, after, _ := strings.Cut(string(stat), ") ")
	return !strings.HasPrefix(after, "Z")
}

// WaitPID waits up to 30 s for path to hold a whole line with a pid (a program writes
// `echo $$ > path`), and returns it. The process is killed when the test ends, in case it
// outlived what should have ended it.
func WaitPID(t *testing.T, path string) int {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if data, err := os.ReadFile(path); err == nil && strings.HasSuffix(string(data), "\n") {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
				t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
				return pid
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no program wrote its pid to %s", path)
		}
	}
}

// WaitGone waits up to 30 s for pid to be gone, and fails the test if it is not.
func WaitGone(t *testing.T, pid int, what string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); Alive(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d) still runs", what, pid)
		}
	}
}

// StartHelper runs this test binary again as a stand-in gateway: only the test named run,
// with env added to the environment (that test skips itself without it). The returned kill
// ends it with SIGKILL, as a crash would, and reaps it; the test's end does so too.
func StartHelper(t *testing.T, run string, env ...string) (kill func()) {
	t.Helper()
	gw := exec.Command(os.Args[0], "-test.run=^"+run+"$", "-test.count=1")
	gw.Env = append(os.Environ(), env...)
	if err := gw.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	kill = func() {
		once.Do(func() {
			_ = gw.Process.Kill()
			_ = gw.Wait()
		})
	}
	t.Cleanup(kill)
	return kill
}
