package hooks

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"gateway/internal/logbuf"
)

// failure is one OnError call.
type failure struct {
	source, event string
	err           error
}

// testBus is a bus whose failures and log lines the test can read.
type testBus struct {
	*Bus
	mu       sync.Mutex
	failures []failure
	log      logbuf.Buffer
}

func newTestBus(t testing.TB, timeout time.Duration) *testBus {
	t.Helper()
	tb := &testBus{}
	tb.Bus = NewBus(Options{
		Timeout: timeout,
		Logger:  slog.New(slog.NewTextHandler(&tb.log, nil)),
		OnError: func(source, event string, err error) {
			tb.mu.Lock()
			defer tb.mu.Unlock()
			tb.failures = append(tb.failures, failure{source, event, err})
		},
	})
	return tb
}

func (tb *testBus) Failures() []failure {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return append([]failure(nil), tb.failures...)
}

// onlyFailure asserts exactly one failure, from source, whose error contains each of want.
func (tb *testBus) onlyFailure(t *testing.T, source string, want ...string) failure {
	t.Helper()
	fs := tb.Failures()
	if len(fs) != 1 {
		t.Fatalf("want 1 failure, got %d: %+v", len(fs), fs)
	}
	f := fs[0]
	if f.source != source {
		t.Errorf("failure source = %q, want %q", f.source, source)
	}
	for _, w := range want {
		if !strings.Contains(f.err.Error(), w) {
			t.Errorf("failure error %q does not contain %q", f.err, w)
		}
	}
	if logged := tb.log.String(); !strings.Contains(logged, "source="+source) {
		t.Errorf("log does not name source %q:\n%s", source, logged)
	}
	return f
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func ptr[T any](v T) *T { return &v }
