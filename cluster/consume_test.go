package cluster_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"gateway/cluster"
	"gateway/cluster/natstest"
)

// proc is one gateway process's intake: its own connection, its own consumer.
type proc struct {
	name   string
	nc     *nats.Conn
	c      *cluster.Consumer
	cancel context.CancelFunc
	done   chan struct{}
}

type record struct {
	mu   sync.Mutex
	got  map[string][]string // chat → bodies, in handling order
	by   map[string][]string // body → the processes that were handed it
	hold map[string]bool     // process → do not ack (it is about to die)
}

func (r *record) handler(t *testing.T, name string) func(cluster.Delivery) {
	return func(d cluster.Delivery) {
		chat, _, _ := strings.Cut(string(d.Body), "#")
		r.mu.Lock()
		r.got[chat] = append(r.got[chat], string(d.Body))
		r.by[string(d.Body)] = append(r.by[string(d.Body)], name)
		hold := r.hold[name]
		r.mu.Unlock()
		if !hold {
			if err := d.Ack(context.Background()); err != nil {
				t.Logf("%s: ack: %v", name, err)
			}
		}
	}
}

func startProc(t *testing.T, url, name string, ttl time.Duration, r *record) *proc {
	t.Helper()
	return startProcWith(t, url, name, ttl, r.handler(t, name))
}

func waitFor(t *testing.T, what string, limit time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestPartitionsAreSharedAndMoveWhenAProcessDies(t *testing.T) {
	url := natstest.Start(t)
	const ttl = 2 * time.Second // renewed every ttl/4: room for a loaded CI machine
	r := &record{got: map[string][]string{}, by: map[string][]string{}, hold: map[string]bool{}}
	a := startProc(t, url, "a", ttl, r)
	waitFor(t, "a holds every partition", 10*time.Second, func() bool { return len(a.c.Held()) == 8 })
	b := startProc(t, url, "b", ttl, r)
	waitFor(t, "a and b share the partitions", 15*time.Second, func() bool {
		return len(a.c.Held()) == 4 && len(b.c.Held()) == 4
	})

	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	in, err := cluster.OpenIntake(ctx, js, cluster.IntakeConfig{Partitions: 8})
	if err != nil {
		t.Fatal(err)
	}
	publish := func(round string) {
		for c := range 20 {
			for m := range 5 {
				chat := fmt.Sprint("telegram:", c)
				body := fmt.Sprintf("%s#%s%d", chat, round, m)
				if _, _, err := in.Publish(ctx, chat, body, []byte(body)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	check := func(round string, want int) {
		t.Helper()
		waitFor(t, fmt.Sprintf("%d messages of round %s handled", want, round), 20*time.Second, func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			n := 0
			for _, l := range r.got {
				for _, x := range l {
					if strings.Contains(x, "#"+round) {
						n++
					}
				}
			}
			return n >= want
		})
	}
	publish("r")
	check("r", 100)
	r.mu.Lock()
	for chat, l := range r.got {
		if fmt.Sprint(l) != fmt.Sprintf("[%[1]s#r0 %[1]s#r1 %[1]s#r2 %[1]s#r3 %[1]s#r4]", chat) {
			t.Errorf("%s handled %q; want r0..r4 once each, in order", chat, l)
		}
	}
	byA, byB := 0, 0
	for body, ps := range r.by {
		if len(ps) != 1 {
			t.Errorf("%s was handed out %v", body, ps)
		}
		if ps[0] == "a" {
			byA++
		} else {
			byB++
		}
	}
	r.hold["a"] = true // a takes its next messages and dies before answering them
	r.mu.Unlock()
	if byA == 0 || byB == 0 {
		t.Fatalf("a handled %d, b %d: the work is not shared", byA, byB)
	}

	publish("s")
	heldByA := a.c.Held()
	waitFor(t, "a took its messages of round s", 10*time.Second, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for body, ps := range r.by {
			if ps[0] == "a" && strings.Contains(body, "#s") {
				return true
			}
		}
		return false
	})
	died := time.Now()
	a.nc.Close() // SIGKILL, as far as NATS can tell: no ack, no release, no renewal
	waitFor(t, "b holds every partition", 10*time.Second, func() bool { return len(b.c.Held()) == 8 })
	t.Logf("a's %d partitions moved to b after %v (lease ttl %v)", len(heldByA), time.Since(died).Round(10*time.Millisecond), ttl)

	// Every message of round s is answered by b, once, and each chat's in order: what a
	// was handed and never acked is handed to b.
	waitFor(t, "b handled all of round s", 20*time.Second, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		n := 0
		for body, ps := range r.by {
			if strings.Contains(body, "#s") && ps[len(ps)-1] == "b" {
				n++
			}
		}
		return n == 100
	})
	time.Sleep(200 * time.Millisecond) // room for a wrong second delivery to show
	r.mu.Lock()
	defer r.mu.Unlock()
	for body, ps := range r.by {
		if !strings.Contains(body, "#s") {
			continue
		}
		nb := strings.Count(strings.Join(ps, ","), "b")
		if nb != 1 || len(ps) > 2 || (len(ps) == 2 && ps[0] != "a") {
			t.Errorf("%s was handed to %v; want b once (after a, if a was handed it)", body, ps)
		}
	}
	for c := range 20 {
		chat := fmt.Sprint("telegram:", c)
		var bOrder, want []string
		for m := range 5 {
			want = append(want, fmt.Sprintf("%s#s%d", chat, m))
		}
		// b's deliveries of the chat's round s, in the order b was handed them.
		seen := map[string]int{}
		for _, x := range r.got[chat] {
			if strings.Contains(x, "#s") {
				seen[x]++
				if seen[x] == len(r.by[x]) && r.by[x][len(r.by[x])-1] == "b" {
					bOrder = append(bOrder, x)
				}
			}
		}
		if fmt.Sprint(bOrder) != fmt.Sprint(want) {
			t.Errorf("%s: b answered round s in the order %q; want %q", chat, bOrder, want)
		}
	}
}

// A parked message does not keep its partition from moving to a process that joins: that
// process is handed it again, and Unpark tells the first process it is no longer its own;
// the messages of the partitions it kept it takes back.
func TestParkedMessagesMoveWithTheirPartition(t *testing.T) {
	url := natstest.Start(t)
	const ttl = 2 * time.Second
	var mu sync.Mutex
	parked := map[string]cluster.Delivery{} // body → a's delivery
	handedToB := map[string]bool{}
	a := startProcWith(t, url, "a", ttl, func(d cluster.Delivery) {
		d.Park()
		mu.Lock()
		parked[string(d.Body)] = d
		mu.Unlock()
	})
	waitFor(t, "a holds every partition", 10*time.Second, func() bool { return len(a.c.Held()) == 8 })

	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	in, err := cluster.OpenIntake(ctx, js, cluster.IntakeConfig{Partitions: 8})
	if err != nil {
		t.Fatal(err)
	}
	partOf := map[string]int{}
	for c := range 40 {
		chat := fmt.Sprint("telegram:", c)
		partOf[chat] = cluster.Partition(chat, 8)
		if _, _, err := in.Publish(ctx, chat, chat, []byte(chat)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "a parked every message", 10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(parked) == 40 })

	b := startProcWith(t, url, "b", ttl, func(d cluster.Delivery) {
		mu.Lock()
		handedToB[string(d.Body)] = true
		mu.Unlock()
	})
	waitFor(t, "a and b share the partitions", 15*time.Second, func() bool {
		return len(a.c.Held()) == 4 && len(b.c.Held()) == 4 && len(b.c.Status()) == 4
	})
	keptByA := map[int]bool{}
	for _, p := range a.c.Held() {
		keptByA[p] = true
	}
	waitFor(t, "b is handed the messages of its partitions", 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for chat := range partOf {
			if !keptByA[partOf[chat]] {
				n++
			}
		}
		return len(handedToB) == n
	})
	mu.Lock()
	defer mu.Unlock()
	for chat, d := range parked {
		kept := keptByA[partOf[chat]]
		if handedToB[chat] == kept {
			t.Errorf("%s (partition %d, kept by a: %v) handed to b: %v", chat, partOf[chat], kept, handedToB[chat])
		}
		if got := d.Unpark(); got != kept {
			t.Errorf("%s: a's Unpark = %v; want %v (kept by a)", chat, got, kept)
		}
	}
}

// startProcWith starts a process's consumer with its own handler.
func startProcWith(t *testing.T, url, name string, ttl time.Duration, handle func(cluster.Delivery)) *proc {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	in, err := cluster.OpenIntake(ctx, js, cluster.IntakeConfig{Partitions: 8})
	if err != nil {
		t.Fatal(err)
	}
	leases, err := cluster.OpenLeases(ctx, js, "GATEWAY_LEASES", ttl)
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{name: name, nc: nc, c: cluster.NewConsumer(in, leases, name, handle, nil), done: make(chan struct{})}
	var rctx context.Context
	rctx, p.cancel = context.WithCancel(ctx)
	go func() {
		defer close(p.done)
		if err := p.c.Run(rctx); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() { p.cancel(); <-p.done; nc.Close() })
	return p
}
