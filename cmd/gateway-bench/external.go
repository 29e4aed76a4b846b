package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"gateway/internal/childproc"
)

// runExternal runs `gateway run` as a child process with the fixture's config and
// measures the child alone.
func runExternal(ctx context.Context, o Options) (Result, error) {
	mode := "external"
	if o.Floor {
		mode = "external, the floor"
	}
	return bench(ctx, o, mode, func(fx *fixture) (*running, error) { return startChild(o.External, o.Floor, fx) }, nil)
}

// startChild starts binary (a copy of it in fx.dir) as `gateway run --config FILE`, or as
// the floor.
func startChild(binary string, floor bool, fx *fixture) (*running, error) {
	bin, err := copyBinary(binary, fx.dir)
	if err != nil {
		return nil, err
	}
	log := &childproc.Tail{Max: 16 << 10}
	args := fx.args()
	what := "`gateway run`"
	if floor {
		args = append([]string{floorArg}, args...)
		what = "the floor (an SDK echo bot, not the gateway)"
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = fx.dir
	cmd.Env = childEnv(fx.dir)
	cmd.Stdout, cmd.Stderr = io.Discard, log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", binary, err)
	}
	done := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(done)
	}()
	pid := cmd.Process.Pid
	return &running{
		tgt:  &childProc{pid: pid, metricsURL: fx.url("/metrics"), client: &http.Client{Timeout: 5 * time.Second}},
		done: done,
		stop: func() error { return stopChild(cmd, done, &waitErr) },
		log:  log,
		what: fmt.Sprintf("%s child process (pid %d) alone, read from /proc; the fakes and the load driver run in the bench process", what, pid),
	}, nil
}

// copyBinary copies the gateway binary into dir and syncs it. The child then runs from a
// file no other process maps, as in production: pages shared with this process (when it
// runs the same binary) would stay in the child's RSS whatever the child does, and a
// freshly written, unsynced file has dirty pages the kernel cannot drop either.
func copyBinary(src, dir string) (string, error) {
	in, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("the gateway binary: %w", err)
	}
	defer in.Close()
	if st, err := in.Stat(); err == nil && st.IsDir() {
		// At the repository's root, ./gateway is the gateway package's folder.
		return "", fmt.Errorf("the gateway binary: %s is a directory (build it elsewhere: go build -o cmd/gateway/gateway ./cmd/gateway)", src)
	}
	dst := filepath.Join(dir, "gateway")
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o700)
	if err != nil {
		return "", err
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("copying the gateway binary: %w", err)
	}
	return dst, nil
}

// childEnv is a clean environment: no GATEWAY_* or API keys from ours leak into the
// child's config; the Go runtime's knobs pass through so that they can be compared.
func childEnv(home string) []string {
	env := []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}
	for _, k := range []string{"GOGC", "GOMEMLIMIT", "GODEBUG", "GOMAXPROCS"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// stopChild asks the child to stop (SIGTERM, as an admin would) and kills it after 30s.
// done is closed when the child has exited, with *waitErr set.
func stopChild(cmd *exec.Cmd, done <-chan struct{}, waitErr *error) error {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		if *waitErr != nil {
			return fmt.Errorf("the gateway did not stop cleanly: %w", *waitErr)
		}
		return nil
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return errors.New("the gateway did not stop within 30s of SIGTERM and was killed")
	}
}

// childProc is the gateway child.
type childProc struct {
	pid        int
	metricsURL string
	client     *http.Client
}

func (c *childProc) mem() (memStatus, error)     { return readMem(strconv.Itoa(c.pid)) }
func (c *childProc) resetPeak() bool             { return resetPeak(strconv.Itoa(c.pid)) }
func (c *childProc) cpu() (time.Duration, error) { return readCPU(c.pid) }

// cheapHeap is false: scraping /metrics costs the child CPU, so it is read only before
// and after the measured run.
func (c *childProc) cheapHeap() bool { return false }

// heap reads the child's Go heap and goroutines from its Prometheus Go collector.
func (c *childProc) heap() (int64, int, bool) {
	v, ok := c.scrape("go_memstats_heap_alloc_bytes", "go_goroutines")
	return int64(v[0]), int(v[1]), ok
}

// runtimeStats reads the child's goroutine stacks, heap spans in use and goroutines from
// its Prometheus Go collector.
func (c *childProc) runtimeStats() (runtimeStats, bool) {
	v, ok := c.scrape("go_memstats_stack_inuse_bytes", "go_memstats_heap_inuse_bytes", "go_goroutines")
	return runtimeStats{Stacks: int64(v[0]), HeapInuse: int64(v[1]), Goroutines: int(v[2])}, ok
}

// scrape reads the named series (unlabelled) from the child's /metrics; ok when all were there.
func (c *childProc) scrape(names ...string) ([]float64, bool) {
	vals := make([]float64, len(names))
	resp, err := c.client.Get(c.metricsURL)
	if err != nil {
		return vals, false
	}
	defer resp.Body.Close()
	found := 0
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 4<<20))
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		for i, n := range names {
			if name == n {
				if v, err := strconv.ParseFloat(val, 64); err == nil {
					vals[i] = v
					found++
				}
			}
		}
	}
	return vals, found == len(names)
}
