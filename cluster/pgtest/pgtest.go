// Package pgtest runs a throwaway Postgres for tests: a fresh cluster (initdb) in a
// temporary directory, served on a free loopback port, stopped and removed afterwards.
// Postgres refuses to run as root, so under root (CI) it runs as the user nobody.
//
// Tests call Database for a fresh database on a server shared by the test binary, and
// TestMain calls Main, which stops that server. Without the Postgres binaries Database
// skips the test, except under CI=true, where it fails: CI installs Debian's postgresql.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"gateway/internal/logbuf"
)

// Server is a running throwaway Postgres.
type Server struct {
	Port int

	dir  string
	bin  string
	cred *syscall.Credential
	log  *logbuf.Buffer
	cmd  *exec.Cmd
	done chan struct{}
}

// ErrNoPostgres is returned by Start when no Postgres binaries are installed.
var ErrNoPostgres = errors.New("pgtest: no Postgres binaries (initdb, postgres) under /usr/lib/postgresql/*/bin or on PATH; install Debian's postgresql")

// BinDir finds the directory of initdb and postgres: the newest /usr/lib/postgresql/N/bin,
// else PATH.
func BinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		d := filepath.Dir(p)
		if isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", ErrNoPostgres
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// Start creates a cluster in a new temporary directory and starts Postgres on a free
// loopback port, with trust authentication for the user postgres. Stop ends it.
func Start(ctx context.Context) (*Server, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, log: &logbuf.Buffer{}}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("nobody")
		if err != nil {
			return nil, fmt.Errorf("pgtest: running as root, and there is no user nobody to run Postgres as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	// /tmp, not $TMPDIR: the user nobody must be able to reach the directory.
	base := os.TempDir()
	if s.cred != nil {
		base = "/tmp"
	}
	if s.dir, err = os.MkdirTemp(base, "pgtest-"); err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	if s.cred != nil {
		if err := os.Chown(s.dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			os.RemoveAll(s.dir)
			return nil, fmt.Errorf("pgtest: %w", err)
		}
	}
	data := filepath.Join(s.dir, "data")
	initdb := s.command(ctx, "initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(s.dir)
		return nil, fmt.Errorf("pgtest: initdb: %v\n%s", err, out)
	}
	var lastErr error
	for range 3 { // a free port may be taken between choosing it and binding it
		if lastErr = s.start(ctx, data); lastErr == nil {
			return s, nil
		}
	}
	os.RemoveAll(s.dir)
	return nil, lastErr
}

func (s *Server) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, name), args...)
	cmd.Env = []string{"LC_ALL=C", "PATH=/usr/bin:/bin", "TZ=UTC"}
	cmd.Dir = s.dir
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return cmd
}

func (s *Server) start(ctx context.Context, data string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	return s.startOn(ctx, data, port)
}

func (s *Server) startOn(ctx context.Context, data string, port int) error {
	s.Port = port
	s.log.Reset()
	// Not CommandContext: the server outlives ctx (it lives until Stop).
	cmd := s.command(context.Background(), "postgres", "-D", data, "-h", "127.0.0.1", "-p", strconv.Itoa(port),
		"-k", "", "-F", "-c", "max_connections=200", "-c", "full_page_writes=off", "-c", "synchronous_commit=off")
	cmd.Stdout, cmd.Stderr = s.log, s.log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: postgres: %w", err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := pgx.Connect(ctx, s.URL("postgres"))
		if err == nil {
			c.Close(ctx)
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("pgtest: postgres exited: %s", s.log.String())
		case <-ctx.Done():
			s.Stop()
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("pgtest: postgres did not accept connections within 30s: %v\n%s", err, s.log.String())
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtest: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// URL is the connection URL of database db.
func (s *Server) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.Port, db)
}

// Stop shuts Postgres down (fast shutdown: clients are disconnected) and removes its
// directory.
func (s *Server) Stop() error {
	s.halt()
	return os.RemoveAll(s.dir)
}

func (s *Server) halt() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-s.done:
		case <-time.After(15 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
		s.cmd = nil
	}
}

// Restart stops Postgres (clients are disconnected), waits down, then starts it again on
// the same data and port: a database restart under a running gateway.
func (s *Server) Restart(ctx context.Context, down time.Duration) error {
	s.halt()
	time.Sleep(down)
	return s.startOn(ctx, filepath.Join(s.dir, "data"), s.Port)
}

// Log is what Postgres printed.
func (s *Server) Log() string { return s.log.String() }

// The server shared by a test binary: started by the first Database, stopped by Main.
var shared struct {
	once sync.Once
	srv  *Server
	err  error
	n    atomic.Int64
}

// New starts a server of t's own (for a package without Main), stopped when t ends; the
// database "postgres" is there to use. Skip and fail as Database.
func New(t testing.TB) *Server {
	t.Helper()
	if _, err := BinDir(); err != nil && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// Database returns the URL of a new, empty database on the shared server; it is dropped
// when t ends. No Postgres installed: t is skipped, or fails under CI=true.
func Database(t testing.TB) string {
	t.Helper()
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		shared.srv, shared.err = Start(ctx)
	})
	if errors.Is(shared.err, ErrNoPostgres) && os.Getenv("CI") != "true" {
		t.Skip(shared.err)
	}
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	name := fmt.Sprintf("t%d_%d", os.Getpid(), shared.n.Add(1))
	ctx := context.Background()
	c, err := pgx.Connect(ctx, shared.srv.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(ctx, shared.srv.URL("postgres"))
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Error(err)
		}
	})
	return shared.srv.URL(name)
}

// Main runs the tests, stops the shared server, and checks that no goroutine leaked.
func Main(m *testing.M) {
	goleak.VerifyTestMain(runThenStop{m})
}

type runThenStop struct{ m *testing.M }

func (r runThenStop) Run() int {
	code := r.m.Run()
	if shared.srv != nil {
		if err := shared.srv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
		}
	}
	return code
}
