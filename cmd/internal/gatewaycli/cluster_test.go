package gatewaycli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"gateway/cluster/natstest"
	"gateway/cluster/pgtest"
	"gateway/state"
)

func TestClusterSectionIsCheckedInPlainWords(t *testing.T) {
	cases := []struct{ name, section, want string }{
		{"postgres url missing", "cluster:\n  nats_url: nats://127.0.0.1:4222\n", "cluster.postgres_url: must be set"},
		{"not a postgres url", "cluster:\n  nats_url: nats://127.0.0.1:4222\n  postgres_url: mysql://u:hunter2@db/x\n", "cluster.postgres_url: mysql://u:xxxxx@db/x is not a postgres://"},
		{"nothing listening", "cluster:\n  nats_url: nats://127.0.0.1:4222\n  postgres_url: postgres://gw:hunter2@127.0.0.1:1/gateway\n", "nothing accepts connections at postgres://gw:xxxxx@127.0.0.1:1/gateway"},
		{"no nats", "cluster:\n  nats_url: nats://gw:hunter2@127.0.0.1:1\n  postgres_url: postgres://gw:hunter2@127.0.0.1:1/gateway\n", "cluster.nats_url: nothing accepts connections at nats://gw:xxxxx@127.0.0.1:1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out := cli(t, context.Background(), nil, "check", "--config", writeConfig(t, "state_dir: STATE\n"+c.section))
			if code != 1 || !strings.Contains(out, c.want) {
				t.Fatalf("exit %d, output:\n%s\nwant exit 1 saying %s", code, out, c.want)
			}
			if strings.Contains(out, "hunter2") {
				t.Fatalf("the password is in the output:\n%s", out)
			}
		})
	}
}

// Without a cluster: section nothing of cluster mode runs: no cluster status, no cluster
// metrics, the intake journaled in state_dir.
func TestSingleNodeTouchesNoPostgres(t *testing.T) {
	cfg, err := loadConfig(writeConfig(t, "state_dir: STATE\n"), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Cluster.Enabled() {
		t.Fatalf("no cluster: key, yet cluster mode is on: %+v", cfg.Cluster)
	}
	root := t.TempDir()
	g := startGateway(t, root, "")
	g.user("c1").ask("hello single node")
	if _, status := g.get("/api/v1/status"); strings.Contains(status, `"cluster"`) {
		t.Fatalf("a single node reports a cluster: %s", status)
	}
	if _, metrics := g.get("/metrics"); strings.Contains(metrics, "gateway_cluster_") {
		t.Fatal("a single node exports cluster metrics")
	}
	if _, err := os.Stat(filepath.Join(root, "data", state.FileName)); err != nil {
		t.Fatalf("the single node's state file: %v", err)
	}
}

// With a cluster: section, check reaches the database, and run keeps the sessions and the
// gateway state there, not under state_dir.
func TestClusterModeKeepsSessionsAndStateInPostgres(t *testing.T) {
	srv := pgtest.New(t)
	url := srv.URL("postgres")
	section := fmt.Sprintf("cluster:\n  nats_url: %s\n  postgres_url: %s\n", natstest.Start(t), url)
	if code, out := cli(t, context.Background(), nil, "check", "--config", writeConfig(t, "state_dir: STATE\n"+section)); code != 0 {
		t.Fatalf("check exit %d:\n%s", code, out)
	}

	root := t.TempDir()
	g := startGateway(t, root, section)
	u := g.user("c1")
	u.ask("hello cluster")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var log string
	if err := conn.QueryRow(ctx, `SELECT string_agg(convert_from(lines, 'UTF8'), '' ORDER BY n) FROM gateway_session_log`).Scan(&log); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log, "hello cluster") {
		t.Fatalf("the session log in Postgres does not hold the message:\n%s", log)
	}
	var pending int
	deadline := time.Now().Add(5 * time.Second)
	for {
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM gateway_journal`).Scan(&pending); err != nil {
			t.Fatal(err)
		}
		if pending == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if pending != 0 {
		t.Fatalf("%d answered messages are still in the Postgres journal", pending)
	}
	var dedup int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM gateway_dedup`).Scan(&dedup); err != nil {
		t.Fatal(err)
	}
	t.Logf("dedup ids in Postgres: %d", dedup)
}

func TestClusterSectionFromTheEnvironment(t *testing.T) {
	env := map[string]string{"GATEWAY_CLUSTER_POSTGRES_URL": "postgres://gw:hunter2@127.0.0.1:1/gateway"}
	code, out := cli(t, context.Background(), env, "check", "--config", writeConfig(t, "state_dir: STATE\n"))
	if code != 1 || !strings.Contains(out, "cluster.nats_url: must be set") || strings.Contains(out, "hunter2") {
		t.Fatalf("exit %d, output:\n%s", code, out)
	}
}
