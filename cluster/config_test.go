package cluster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"gateway/cluster"
	"gateway/cluster/pgtest"
	"gateway/internal/secret"
	"gateway/state"
)

func TestRedactHidesPasswords(t *testing.T) {
	for raw, want := range map[string]string{
		"postgres://gw:s3cr%2Ft@db:5432/gateway":          "postgres://gw:xxxxx@db:5432/gateway",
		"postgres://db/gateway?user=gw&password=s3cr%2Ft": "postgres://db/gateway?password=xxxxx&user=gw",
		"nats://gw:s3cr%2Ft@nats:4222":                    "nats://gw:xxxxx@nats:4222",
		"postgres://db/gateway":                           "postgres://db/gateway",
	} {
		if got := cluster.Redact(raw); got != want {
			t.Errorf("Redact(%q) = %q; want %q", raw, got, want)
		}
	}
}

func TestValidateNamesTheKey(t *testing.T) {
	if err := (cluster.Config{}).Validate(); err != nil {
		t.Fatalf("no cluster section: %v", err)
	}
	err := cluster.Config{PostgresURL: secret.Secret("postgres://gw:s3cret@db/x")}.Validate()
	if err == nil || !strings.Contains(err.Error(), "cluster.nats_url: must be set") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("Validate = %v", err)
	}
}

func TestCheckReachesPostgresInPlainWords(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	url := pgtest.Database(t)
	if err := cluster.Check(ctx, url); err != nil {
		t.Fatalf("a fresh database: %v", err)
	}
	p := openPG(t, url, state.Limits{})
	p.Close()
	if err := cluster.Check(ctx, url); err != nil {
		t.Fatalf("a migrated database: %v", err)
	}
	missing := strings.Replace(url, "/t", "/nosuchdb", 1)
	if err := cluster.Check(ctx, missing); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("a missing database: %v", err)
	}
	if err := cluster.Check(ctx, "postgres://gw:s3cret@127.0.0.1:1/x?connect_timeout=2"); err == nil ||
		!strings.Contains(err.Error(), "nothing accepts connections") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("nothing listening: %v", err)
	}
}
