package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"gateway/cluster"
	"gateway/cluster/natstest"
)

// holdResult is what a Hold returned.
type holdResult struct {
	held    context.Context
	release func()
	err     error
}

func leasesOn(t *testing.T, url string, ttl time.Duration) (*cluster.Leases, *nats.Conn) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	l, err := cluster.OpenLeases(context.Background(), js, "GATEWAY_LEASES", ttl)
	if err != nil {
		t.Fatal(err)
	}
	return l, nc
}

func holdAsync(ctx context.Context, h *cluster.Holder, name string) <-chan holdResult {
	ch := make(chan holdResult, 1)
	go func() {
		held, release, err := h.Hold(ctx, name)
		ch <- holdResult{held, release, err}
	}()
	return ch
}

func waitHold(t *testing.T, ch <-chan holdResult, what string) holdResult {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		return r
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: not held within 30s", what)
	}
	return holdResult{}
}

func waitDone(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: the hold did not end within 30s", what)
	}
}

// One process at a time holds a connection: a second gets it when the first gives it up,
// and when the first stops renewing (it died, or lost NATS), once the lease expired; the
// first's hold ends then, so that it stops polling.
func TestHolderMovesTheHoldOnReleaseAndWhenRenewalStops(t *testing.T) {
	const ttl = 2 * time.Second
	const name = "conn.telegram.42"
	url := natstest.Start(t)
	l1, _ := leasesOn(t, url, ttl)
	l2, nc2 := leasesOn(t, url, ttl)
	l3, _ := leasesOn(t, url, ttl)
	one, two, three := cluster.NewHolder(l1, "one", nil), cluster.NewHolder(l2, "two", nil), cluster.NewHolder(l3, "three", nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	first := waitHold(t, holdAsync(ctx, one, name), "the first holder")
	second := holdAsync(ctx, two, name)
	// Two TTLs: the first renews, so the lease never expires and the second waits.
	time.Sleep(2 * ttl)
	select {
	case r := <-second:
		t.Fatalf("the second holder got the hold while the first renews it (err %v)", r.err)
	default:
	}
	if first.held.Err() != nil {
		t.Fatal("the first hold ended while it was renewed")
	}
	if who, _ := l1.Holder(ctx, name); who != "one" {
		t.Fatalf("holder %q; want one", who)
	}

	first.release()
	first.release() // idempotent
	got := waitHold(t, second, "the second holder after the first released")
	if first.held.Err() == nil {
		t.Fatal("the first hold is still live after release")
	}
	if who, _ := l1.Holder(ctx, name); who != "two" {
		t.Fatalf("holder %q after the take-over; want two", who)
	}

	// The second stops renewing: its NATS connection is gone.
	third := holdAsync(ctx, three, name)
	nc2.Close()
	waitDone(t, got.held, "the holder that cannot renew")
	r := waitHold(t, third, "the third holder after the second stopped renewing")
	defer r.release()
	got.release()
	if who, _ := l1.Holder(ctx, name); who != "three" {
		t.Fatalf("holder %q after the lease expired; want three", who)
	}
	if r.held.Err() != nil {
		t.Fatal("the new hold ended")
	}
}

// Hold gives up when its context ends, and a hold ends with the context it was taken in.
func TestHolderHoldEndsWithItsContext(t *testing.T) {
	const ttl = 2 * time.Second
	url := natstest.Start(t)
	l1, _ := leasesOn(t, url, ttl)
	l2, _ := leasesOn(t, url, ttl)
	ctx1, cancel1 := context.WithCancel(context.Background())
	r := waitHold(t, holdAsync(ctx1, cluster.NewHolder(l1, "one", nil), "x"), "the first holder")
	ctx2, cancel2 := context.WithTimeout(context.Background(), 3*ttl)
	defer cancel2()
	if _, _, err := cluster.NewHolder(l2, "two", nil).Hold(ctx2, "x"); err == nil {
		t.Fatal("a second holder got a held lease")
	}
	cancel1()
	waitDone(t, r.held, "a hold whose context ended")
	r.release()
	// The lease was given up, not left to expire: it is free at once.
	ctx3, cancel3 := context.WithTimeout(context.Background(), ttl/2)
	defer cancel3()
	if who, err := l2.Holder(ctx3, "x"); err != nil || who != "" {
		t.Fatalf("after the hold ended: holder %q, %v; want free", who, err)
	}
}

// A renewal that reached the bucket but whose answer the lease never had (the hold ended
// while it was in flight) leaves the entry at a revision the lease does not know: releasing
// still frees it at once, rather than leaving it blocked for a TTL. Another holder's entry
// is left alone.
func TestReleaseAfterARenewalItNeverHeardOfFreesTheLease(t *testing.T) {
	url := natstest.Start(t)
	l, _ := leasesOn(t, url, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lease, err := l.Acquire(ctx, "x", "one")
	if err != nil {
		t.Fatal(err)
	}
	inFlight := *lease // the same lease, whose renewal's answer the original never sees
	if err := inFlight.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if who, err := l.Holder(ctx, "x"); err != nil || who != "" {
		t.Fatalf("after the release: holder %q, %v; want free", who, err)
	}

	other, err := l.Acquire(ctx, "x", "two")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(ctx)
	if err := lease.Release(ctx); err != nil { // "one" released long ago
		t.Fatal(err)
	}
	if who, _ := l.Holder(ctx, "x"); who != "two" {
		t.Fatalf("a stale release of one removed the lease two holds: holder %q", who)
	}
}
