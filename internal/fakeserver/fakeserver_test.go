package fakeserver

import (
	"context"
	"net/http"
	"testing"
	"time"
)

func TestFailuresTakeInOrderByMethodAndChat(t *testing.T) {
	var s Failures
	sending := func(m string) bool { return m == "send" }
	s.Add(1, Failure{Method: "typing", Chat: "7", RetryAfter: time.Second})
	s.Add(2, Failure{})
	if _, ok := s.Take("typing", "8", sending); ok {
		t.Fatal("a failure for chat 7 hit chat 8")
	}
	if _, ok := s.Take("other", "", sending); ok {
		t.Fatal("a default failure hit a call outside the default set")
	}
	f, ok := s.Take("typing", "7", sending)
	if !ok || f.Code() != http.StatusTooManyRequests || f.Seconds() != 1 {
		t.Fatalf("typing to 7: %+v %v", f, ok)
	}
	for i := range 2 {
		if f, ok := s.Take("send", "1", sending); !ok || f.Code() != 500 {
			t.Fatalf("send %d: %+v %v", i, f, ok)
		}
	}
	if s.Len() != 0 {
		t.Fatalf("%d left", s.Len())
	}
}

func TestServerCloseWaitsForGoroutines(t *testing.T) {
	s := New(http.NotFoundHandler())
	done := make(chan struct{})
	s.Go(func(ctx context.Context) { <-ctx.Done(); close(done) })
	s.Close()
	s.Close()
	select {
	case <-done:
	default:
		t.Fatal("Close returned before the goroutine ended")
	}
}
