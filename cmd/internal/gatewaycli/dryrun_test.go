package gatewaycli

import (
	"context"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gateway/hooks"
)

// listTree lists every path under root, relative to it.
func listTree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out = append(out, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDryRunsInAnEmptyDirCreateNothing: `check` and `hooks list` with no config file at all
// (state_dir ./data, hooks and profiles under it) leave the working directory as it was.
func TestDryRunsInAnEmptyDirCreateNothing(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	before := listTree(t, dir)
	for _, args := range [][]string{{"check"}, {"hooks", "list"}} {
		code, out := cli(t, context.Background(), nil, args...)
		if code != 0 {
			t.Fatalf("gateway %s: exit %d:\n%s", strings.Join(args, " "), code, out)
		}
		if after := listTree(t, dir); !slices.Equal(before, after) {
			t.Fatalf("gateway %s created files: before %v, after %v", strings.Join(args, " "), before, after)
		}
	}
}

// TestDryRunsRunNoHookProgram: a hook that observes every event and writes a file when it
// runs is loaded (and listed) by `check` and `hooks list`, but never run: they emit nothing,
// not even gateway:stop when they let the never-started gateway go. Nothing else is written
// either: state_dir is not created.
func TestDryRunsRunNoHookProgram(t *testing.T) {
	root := t.TempDir()
	marker := filepath.Join(root, "hook-ran")
	writeHook(t, filepath.Join(root, "hooks"), "spy", "events: [\"*\"]\ncommand: [./run.sh]\n",
		"cat >/dev/null\necho ran >> '"+marker+"'\n")
	path := filepath.Join(root, "gateway.yaml")
	writeFile(t, path, "state_dir: "+filepath.Join(root, "data")+"\nhooks: {dirs: ["+filepath.Join(root, "hooks")+"]}\nprofiles: {dir: "+filepath.Join(root, "profiles")+"}\n")
	before := listTree(t, root)

	code, out := cli(t, context.Background(), nil, "check", "--config", path)
	if code != 0 || !strings.Contains(out, "config OK") {
		t.Fatalf("check: exit %d:\n%s", code, out)
	}
	code, out = cli(t, context.Background(), nil, "hooks", "list", "--config", path)
	if code != 0 || !strings.Contains(out, "/spy") {
		t.Fatalf("hooks list: exit %d, want the spy hook listed:\n%s", code, out)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a dry run ran the hook program")
	}
	if after := listTree(t, root); !slices.Equal(before, after) {
		t.Fatalf("dry runs wrote files: before %v, after %v", before, after)
	}

	// The control: the same hook, given an event, does run and write its file.
	cfg, err := loadChecked(path, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	a, err := buildApp(cfg, path, slog.New(slog.DiscardHandler), func(string) string { return "" }, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	a.gw.Runtime().Bus.Emit(context.Background(), &hooks.GatewayStop{Reason: "test"})
	_ = a.gw.Stop(context.Background())
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the hook did not run on an event either, so the test proves nothing: %v", err)
	}
}

// TestStoppingANeverStartedGatewayEmitsNothing: the admin's hooks hear gateway:stop only from
// a gateway that had started.
func TestStoppingANeverStartedGatewayEmitsNothing(t *testing.T) {
	root := t.TempDir()
	cfg, err := loadChecked("", func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cfg.StateDir = filepath.Join(root, "data")
	cfg.Hooks.Dirs, cfg.Profiles.Dir = nil, ""
	a, err := buildApp(cfg, "", slog.New(slog.DiscardHandler), func(string) string { return "" }, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	var seen atomic.Int32
	var names atomic.Value
	a.gw.Runtime().Bus.Observe("test", func(_ context.Context, ev hooks.Event) {
		seen.Add(1)
		names.Store(ev.EventName())
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.gw.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if n := seen.Load(); n != 0 {
		t.Fatalf("stopping a gateway that never started emitted %d events (last %v)", n, names.Load())
	}
}
