package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"gateway/channels/telegram/telegramtest"
	"gateway/harness/openaitest"
)

// runExternal runs `gateway run` as a child process against a fake Bot API (and, for
// ProviderOpenAI, a fake OpenAI API) served by this process, and measures the child.
func runExternal(ctx context.Context, o Options) (res Result, err error) {
	dir, err := os.MkdirTemp("", "gateway-bench-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)

	tr := newTracker(o.Chats)
	fake := telegramtest.Start(telegramtest.Options{OnSent: tr.onSent})
	defer fake.Close()

	llmCfg := map[string]any{"provider": "fake", "model": "bench"}
	if o.Provider == ProviderOpenAI {
		oa := openaitest.NewServer()
		defer oa.Close()
		delay := o.ModelDelay
		oa.SetFunc(func(r openaitest.Request) openaitest.Reply {
			text := ""
			for _, m := range r.Messages {
				if m.Role == "user" {
					text = m.Content
				}
			}
			return openaitest.Reply{Text: text, Delay: delay}
		})
		llmCfg = map[string]any{"provider": "openai", "model": "bench", "base_url": oa.URL(), "api_key": "sk-bench"}
	}
	port, err := freePort()
	if err != nil {
		return Result{}, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cfg := map[string]any{
		"state_dir": filepath.Join(dir, "state"),
		"http":      map[string]any{"listen": addr},
		"log":       map[string]any{"level": "warn", "format": "json"},
		"llm":       llmCfg,
		"stt":       map[string]any{"enabled": false},
		"tts":       map[string]any{"mode": "off"},
		"hooks":     map[string]any{"dirs": []string{}},
		"profiles":  map[string]any{"dir": filepath.Join(dir, "profiles")},
		"channels": map[string]any{
			"web": map[string]any{"enabled": false},
			"telegram": map[string]any{
				"enabled": true, "token": telegramtest.Token, "api_url": fake.URL,
				"dm_policy": "open", "allow_from": []string{},
			},
		},
	}
	cfgPath := filepath.Join(dir, "gateway.yaml")
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return Result{}, err
	}
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		return Result{}, err
	}

	bin, err := copyBinary(o.External, dir)
	if err != nil {
		return Result{}, err
	}
	stderr := &tailBuffer{max: 16 << 10}
	cmd := exec.Command(bin, "run", "--config", cfgPath)
	cmd.Dir = dir
	cmd.Env = childEnv(dir)
	cmd.Stdout, cmd.Stderr = io.Discard, stderr
	if err := cmd.Start(); err != nil {
		return Result{}, fmt.Errorf("starting %s: %w", o.External, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	child := &childProc{pid: cmd.Process.Pid, metricsURL: "http://" + addr + "/metrics", client: &http.Client{Timeout: 5 * time.Second}}
	defer func() {
		if serr := stopChild(cmd, exited); serr != nil && err == nil {
			err = fmt.Errorf("%w\n%s", serr, stderr.String())
		}
	}()
	o.Logf("started %s (pid %d); waiting for /readyz", o.External, child.pid)
	if err := waitReady(ctx, child.client, "http://"+addr+"/readyz", exited); err != nil {
		return Result{}, fmt.Errorf("%w\nits log:\n%s", err, stderr.String())
	}
	// Let start-up work settle (the first getUpdates, the setMyCommands answer).
	select {
	case <-time.After(500 * time.Millisecond):
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	res, err = measure(ctx, o, tr, fake, child, nil)
	res.Mode = "external"
	res.Includes = fmt.Sprintf("`gateway run` child process (pid %d) alone, read from /proc; the fakes and the load driver run in the bench process", child.pid)
	if err != nil && stderr.Len() > 0 {
		err = fmt.Errorf("%w\nthe child's log:\n%s", err, stderr.String())
	}
	return res, err
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

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func waitReady(ctx context.Context, client *http.Client, url string, exited <-chan error) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-exited:
			return fmt.Errorf("the gateway exited before it was ready: %v", err)
		case <-ctx.Done():
			return fmt.Errorf("the gateway was not ready within a minute: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stopChild asks the child to stop (SIGTERM, as an admin would) and kills it after 30s.
func stopChild(cmd *exec.Cmd, exited <-chan error) error {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			return fmt.Errorf("the gateway did not stop cleanly: %w", err)
		}
		return nil
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
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
	resp, err := c.client.Get(c.metricsURL)
	if err != nil {
		return 0, 0, false
	}
	defer resp.Body.Close()
	var heap, gor float64
	var haveHeap, haveGor bool
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 4<<20))
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		switch name {
		case "go_memstats_heap_alloc_bytes":
			heap, err = strconv.ParseFloat(val, 64)
			haveHeap = err == nil
		case "go_goroutines":
			gor, err = strconv.ParseFloat(val, 64)
			haveGor = err == nil
		}
	}
	return int64(heap), int(gor), haveHeap && haveGor
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf bytes.Buffer
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf.Write(p)
	if extra := t.buf.Len() - t.max; extra > 0 {
		t.buf.Next(extra)
	}
	return len(p), nil
}

func (t *tailBuffer) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.buf.Len()
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.buf.String()
}
