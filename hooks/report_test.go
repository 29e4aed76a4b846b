package hooks

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"gateway/channels"
)

// The emitter learns which handlers of its own emit failed, whatever the way they failed.
func TestFailureReportNamesTheFailedHandlersOfThisEmit(t *testing.T) {
	b := newTestBus(t, 50*time.Millisecond)
	b.On(NameMessageReceive, "dir:hooks/err", func(ctx context.Context, ev Event) (any, error) { return nil, errors.New("exit status 2") })
	b.On(NameMessageReceive, "dir:hooks/panic", func(ctx context.Context, ev Event) (any, error) { panic("boom") })
	b.On(NameMessageReceive, "dir:hooks/slow", func(ctx context.Context, ev Event) (any, error) { <-ctx.Done(); return nil, nil })
	b.On(NameMessageReceive, "dir:hooks/wrong", func(ctx context.Context, ev Event) (any, error) { return &SendResult{}, nil })
	b.On(NameMessageReceive, "dir:hooks/fine", func(ctx context.Context, ev Event) (any, error) { return nil, nil })

	var got []string
	ctx := WithFailureReport(ctxT(t), func(source string, err error) { got = append(got, source+": "+err.Error()) })
	b.Receive(ctx, receiveEvent(channels.TextPart("hi")))
	want := []string{"dir:hooks/err: exit status 2", "dir:hooks/panic: panic: boom", "dir:hooks/slow: timed out", "dir:hooks/wrong: handler returned"}
	if len(got) != len(want) {
		t.Fatalf("reported %q; want the four failed handlers", got)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("report %d = %q; want it to start with %q", i, got[i], want[i])
		}
	}

	// An emit without a report, or whose caller gave up, reports nothing to it.
	b.Receive(ctxT(t), receiveEvent(channels.TextPart("hi")))
	cctx, cancel := context.WithCancel(WithFailureReport(ctxT(t), func(source string, err error) { t.Errorf("reported %s: %v after the caller gave up", source, err) }))
	b.On(NameMessageEnd, "dir:hooks/late", func(ctx context.Context, ev Event) (any, error) { cancel(); <-ctx.Done(); return nil, ctx.Err() })
	b.Emit(cctx, &MessageEnd{})
}
