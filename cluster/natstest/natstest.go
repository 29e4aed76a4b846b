// Package natstest runs a NATS server with JetStream on loopback for tests, from its Go
// module (github.com/nats-io/nats-server/v2), its store in a temporary directory: embedded
// in the test (New, Start), or as a process of its own built by the test (NewProcess).
package natstest

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Server is an embedded NATS server that can be restarted on the same port and store, as
// an operator restarting NATS under a running gateway.
type Server struct {
	t    testing.TB
	mu   sync.Mutex
	opts server.Options
	srv  *server.Server // nil while stopped
	url  string
}

// New starts a server for t, stopped when t ends.
func New(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, opts: server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true,
	}}
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	// The port the first start chose is kept: a restart comes back on it, so that clients
	// reconnect to the same URL.
	s.opts.Port = s.srv.Addr().(*net.TCPAddr).Port
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) start() error {
	opts := s.opts
	srv, err := server.NewServer(&opts)
	if err != nil {
		return fmt.Errorf("natstest: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return fmt.Errorf("natstest: the NATS server did not start within 10s")
	}
	s.srv, s.url = srv, srv.ClientURL()
	return nil
}

// URL is the client URL; the same after a restart.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.url
}

// Restart shuts the server down (clients are disconnected), waits down, and starts it
// again on the same port and store: streams, their messages and KV buckets are kept. Call
// it from the test's goroutine (it fails the test when the server does not come back).
func (s *Server) Restart(down time.Duration) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	restart(s.t, s.halt, s.start, down)
}

// restart stops a server, waits down and starts it again, failing t when it does not
// come back.
func restart(t testing.TB, halt func(), start func() error, down time.Duration) {
	t.Helper()
	halt()
	time.Sleep(down)
	var err error
	for range 3 { // the port may linger a moment after the stop
		if err = start(); err == nil {
			return
		}
		time.Sleep(time.Second)
	}
	t.Fatal(err)
}

// Stop shuts the server down; idempotent.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.halt()
}

func (s *Server) halt() {
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
		s.srv = nil
	}
}

// Start starts a server for t, shut down when t ends, and returns its client URL.
func Start(t testing.TB) string {
	t.Helper()
	return New(t).URL()
}
