package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"gateway/cluster"
	"gateway/cluster/natstest"
)

func jetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(natstest.Start(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func TestPartitionIsStableAndSpreads(t *testing.T) {
	seen := map[int]bool{}
	for i := range 200 {
		key := fmt.Sprintf("telegram:%d", i)
		p := cluster.Partition(key, 16)
		if p < 0 || p >= 16 || p != cluster.Partition(key, 16) {
			t.Fatalf("partition of %s = %d", key, p)
		}
		seen[p] = true
	}
	if len(seen) < 12 {
		t.Fatalf("200 chats use %d of 16 partitions", len(seen))
	}
}

func TestIntakePublishesByPartitionOnceAndInOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	js := jetStream(t)
	in, err := cluster.OpenIntake(ctx, js, cluster.IntakeConfig{Partitions: 8})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		_, dup, err := in.Publish(ctx, "slack:C1:T1", fmt.Sprint("slack|C1|", i), fmt.Appendf(nil, "m%d", i))
		if err != nil || dup {
			t.Fatalf("publish %d: dup %v, %v", i, dup, err)
		}
	}
	// A platform redelivery of message 3 is stored once.
	if _, dup, err := in.Publish(ctx, "slack:C1:T1", "slack|C1|3", []byte("m3 again")); err != nil || !dup {
		t.Fatalf("redelivery: dup %v, %v; want a duplicate", dup, err)
	}
	if _, _, err := in.Publish(ctx, "", "x", nil); err == nil {
		t.Fatal("a message without a session key was published")
	}
	p := cluster.Partition("slack:C1:T1", in.Partitions())
	cons, err := js.CreateOrUpdateConsumer(ctx, "GATEWAY_INTAKE", jetstream.ConsumerConfig{
		Durable: fmt.Sprint("intake-", p), FilterSubject: in.Subject(p), AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(10, jetstream.FetchMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for m := range batch.Messages() {
		got = append(got, string(m.Data()))
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(got) != "[m0 m1 m2 m3 m4]" {
		t.Fatalf("partition %d holds %q; want m0..m4 once each, in order", p, got)
	}
}

func TestLeaseMovesToASurvivorWhenItsHolderStopsRenewing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := jetStream(t)
	const ttl = 2 * time.Second
	leases, err := cluster.OpenLeases(ctx, js, "GATEWAY_LEASES", ttl)
	if err != nil {
		t.Fatal(err)
	}
	a, err := leases.Acquire(ctx, "conn.telegram.1", "proc-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leases.Acquire(ctx, "conn.telegram.1", "proc-b"); !errors.Is(err, cluster.ErrLeaseHeld) {
		t.Fatalf("second holder = %v; want ErrLeaseHeld", err)
	}
	// Renewing keeps it past its TTL.
	for range 4 {
		time.Sleep(ttl / 3)
		if err := a.Renew(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if h, _ := leases.Holder(ctx, "conn.telegram.1"); h != "proc-a" {
		t.Fatalf("holder = %q", h)
	}
	// proc-a dies (stops renewing): proc-b gets the lease within the TTL and a margin.
	start := time.Now()
	var b *cluster.Lease
	for b == nil {
		if time.Since(start) > ttl+5*time.Second {
			t.Fatal("the lease did not move to the survivor")
		}
		time.Sleep(50 * time.Millisecond)
		if b, err = leases.Acquire(ctx, "conn.telegram.1", "proc-b"); err != nil && !errors.Is(err, cluster.ErrLeaseHeld) {
			t.Fatal(err)
		}
	}
	t.Logf("lease moved after %v (ttl %v)", time.Since(start).Round(10*time.Millisecond), ttl)
	if err := a.Renew(ctx); !errors.Is(err, cluster.ErrLeaseLost) {
		t.Fatalf("the old holder's renewal = %v; want ErrLeaseLost", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatalf("a stale release = %v; want it to do nothing", err)
	}
	if h, _ := leases.Holder(ctx, "conn.telegram.1"); h != "proc-b" {
		t.Fatalf("a stale release freed the lease: holder = %q", h)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := leases.Acquire(ctx, "conn.telegram.1", "proc-a"); err != nil {
		t.Fatalf("after a release: %v", err)
	}
}
