package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"gateway/cluster"
	"gateway/cluster/pgtest"
	"gateway/harness"
	"gateway/harness/storetest"
	"gateway/state"
	"gateway/state/statetest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func openPG(t *testing.T, url string, lim state.Limits) *cluster.Postgres {
	t.Helper()
	p, err := cluster.OpenPostgres(context.Background(), url, lim)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPostgresStateBehaviour(t *testing.T) {
	var url string
	statetest.Run(t, statetest.Backend{
		Open: func(t *testing.T, lim state.Limits) statetest.DB {
			url = pgtest.Database(t)
			return openPG(t, url, lim)
		},
		Reopen:   func(t *testing.T, lim state.Limits) statetest.DB { return openPG(t, url, lim) },
		SetClock: func(db statetest.DB, now func() time.Time) { cluster.SetClock(db.(*cluster.Postgres), now) },
	})
}

// sessions closes its database with the store: the suite closes only the store.
type sessions struct {
	*cluster.Sessions
	p *cluster.Postgres
}

func (s sessions) Close() error {
	err := s.Sessions.Close()
	s.p.Close()
	return err
}

func TestPostgresSessionStoreBehaviour(t *testing.T) {
	var url string
	open := func(t *testing.T) harness.SessionStore {
		p := openPG(t, url, state.Limits{})
		return sessions{p.Sessions(), p}
	}
	storetest.Run(t, func(t *testing.T) harness.SessionStore {
		url = pgtest.Database(t)
		return open(t)
	}, open)
}

// A Postgres restart under a running gateway: calls fail while it is down (within the
// timeout, not hanging), and work again once it is back, on the same Postgres value.
func TestPostgresRestartIsSurvived(t *testing.T) {
	srv := pgtest.New(t)
	p := openPG(t, srv.URL("postgres"), state.Limits{})
	defer p.Close()
	if err := p.SetSetting("telegram:1", "voice", "on"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := srv.Restart(ctx, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		v, ok, err := p.Setting("telegram:1", "voice")
		if err == nil {
			if !ok || v != "on" {
				t.Fatalf("after the restart: %q %v", v, ok)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing 15s after Postgres came back: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := p.Accept("telegram|1|9", []byte("x")); err != nil {
		t.Fatalf("accept after the restart: %v", err)
	}
}

// Postgres is the adapters' channels.State in cluster mode: remembered keys are bounded
// (the oldest forgotten first), kept apart by set, survive a reopen and age out.
func TestPostgresRememberedKeysAreBoundedAndSurviveReopen(t *testing.T) {
	url := pgtest.Database(t)
	db := openPG(t, url, state.Limits{})
	clock := time.Unix(1_700_000_000, 0)
	cluster.SetClock(db, func() time.Time { return clock })
	for i := range 30 {
		clock = clock.Add(time.Second)
		if err := db.Remember("slack.threads", fmt.Sprint("C1:", i), 10, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if n := cluster.RememberedCount(db, "slack.threads"); n > 11 {
		t.Fatalf("set holds %d keys; bound is 10 (+10%% slack)", n)
	}
	if ok, _ := db.Remembered("slack.threads", "C1:0", time.Hour); ok {
		t.Fatal("the oldest key beyond the bound is still remembered")
	}
	if ok, _ := db.Remembered("other", "C1:29", time.Hour); ok {
		t.Fatal("sets are not apart")
	}
	if err := db.Remember("slack.threads", "", 10, time.Hour); err == nil {
		t.Fatal("an empty key was accepted")
	}
	db.Close()
	db = openPG(t, url, state.Limits{})
	defer db.Close()
	cluster.SetClock(db, func() time.Time { return clock })
	if ok, err := db.Remembered("slack.threads", "C1:29", time.Hour); err != nil || !ok {
		t.Fatalf("the newest key after reopen = %v %v; want remembered", ok, err)
	}
	clock = clock.Add(2 * time.Hour)
	if ok, _ := db.Remembered("slack.threads", "C1:29", time.Hour); ok {
		t.Fatal("a key older than the age is still remembered")
	}
}
