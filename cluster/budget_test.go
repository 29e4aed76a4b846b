package cluster_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gateway/cluster/pgtest"
	"gateway/state"
)

// Three processes sharing one budget take together no faster than its rate: N tokens from a
// bucket of burst B refilled at R per second take at least (N-B)/R, whatever the number of
// processes. (A correctness bound: three times the rate, the bug this guards against, would
// take a third of it.)
func TestBudgetIsSharedAcrossProcesses(t *testing.T) {
	url := pgtest.Database(t)
	const (
		rate  = 20.0
		burst = 5
		each  = 15
		procs = 3
	)
	var wg sync.WaitGroup
	var taken atomic.Int32
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pgs := make([]interface{ Close() error }, 0, procs)
	start := time.Now()
	for i := range procs {
		p := openPG(t, url, state.Limits{})
		pgs = append(pgs, p)
		b := p.Budget("telegram.bot.1", rate, burst)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if err := b.Take(ctx); err != nil {
					t.Errorf("process %d: Take: %v", i, err)
					return
				}
				taken.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	for _, p := range pgs {
		p.Close()
	}
	if taken.Load() != procs*each {
		t.Fatalf("took %d tokens; want %d", taken.Load(), procs*each)
	}
	least := time.Duration(float64(procs*each-burst) / rate * float64(time.Second))
	if elapsed < least-10*time.Millisecond {
		t.Fatalf("%d processes took %d tokens in %v; a budget of %v/s with burst %d allows no less than %v",
			procs, procs*each, elapsed, rate, burst, least)
	}
	t.Logf("%d tokens in %v (bound %v)", procs*each, elapsed, least)
}

// A spent budget makes Take wait until its context ends; other names are apart.
func TestBudgetWaitsWhenSpent(t *testing.T) {
	p := openPG(t, pgtest.Database(t), state.Limits{})
	defer p.Close()
	b := p.Budget("slow", 0.01, 1)
	ctx := context.Background()
	if err := b.Take(ctx); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := b.Take(short); err == nil {
		t.Fatal("Take of a spent budget returned nil; want it to wait until the context ended")
	}
	for i := range 3 {
		if err := p.Budget(fmt.Sprint("other", i), 0.01, 1).Take(ctx); err != nil {
			t.Fatalf("another budget: %v", err)
		}
	}
}

// A budget Postgres cannot answer for lets the send go rather than lose the answer: each
// process still keeps its own pace, and Telegram's retry_after still holds.
func TestBudgetLetsTheSendGoWhenPostgresIsAway(t *testing.T) {
	p := openPG(t, pgtest.Database(t), state.Limits{})
	b := p.Budget("away", 0.01, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.Take(ctx); err != nil {
		t.Fatal(err)
	}
	p.Close()
	for range 3 {
		if err := b.Take(ctx); err != nil {
			t.Fatalf("Take with Postgres away = %v; want the send to go", err)
		}
	}
}
