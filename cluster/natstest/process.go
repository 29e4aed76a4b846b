package natstest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Process is a NATS server with JetStream run as a process of its own, built by the test
// from the module (github.com/nats-io/nats-server/v2): under -race the server's code then
// runs outside the test binary, whose race detector is for the gateway's code. Use it where
// several gateway processes load the server at once. Restart keeps the port and the store.
type Process struct {
	t     testing.TB
	bin   string
	store string
	port  int
	mu    sync.Mutex
	cmd   *exec.Cmd // nil while stopped
	done  chan struct{}
}

// NewProcess builds and starts a server for t, stopped when t ends.
func NewProcess(t testing.TB) *Process {
	t.Helper()
	dir := t.TempDir()
	p := &Process{t: t, bin: filepath.Join(dir, "nats-server"), store: filepath.Join(dir, "store")}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", p.bin, "github.com/nats-io/nats-server/v2")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("natstest: cannot build nats-server from the module: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.port = ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

// URL is the client URL; the same after a restart.
func (p *Process) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(p.port) }

func (p *Process) start() error {
	cmd := exec.Command(p.bin, "-a", "127.0.0.1", "-p", strconv.Itoa(p.port), "-js", "-sd", p.store)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("natstest: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p.cmd, p.done = cmd, done
	deadline := time.Now().Add(20 * time.Second)
	for {
		if ready(p.URL()) {
			return nil
		}
		select {
		case <-done:
			p.cmd = nil
			return fmt.Errorf("natstest: nats-server exited at start")
		default:
		}
		if time.Now().After(deadline) {
			p.halt()
			return fmt.Errorf("natstest: nats-server was not ready within 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ready reports whether the server takes connections and its JetStream answers.
func ready(url string) bool {
	nc, err := nats.Connect(url, nats.Timeout(time.Second), nats.NoReconnect())
	if err != nil {
		return false
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	return err == nil
}

// Restart stops the server (clients are disconnected), waits down, and starts it again on
// the same port and store. Call it from the test's goroutine.
func (p *Process) Restart(down time.Duration) {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	restart(p.t, p.halt, p.start, down)
}

// Stop stops the server; idempotent.
func (p *Process) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.halt()
}

func (p *Process) halt() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.cmd = nil
}
