package state

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t *testing.T, dir string, lim Limits) (*DB, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	db, err := Open(dir, lim, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return db, &logs
}

// The count bound, as bbolt stores it (the suite checks what a caller sees).
func TestDedupWindowIsBoundedByCountAndAge(t *testing.T) {
	db, _ := open(t, t.TempDir(), Limits{DedupMax: 10, DedupAge: time.Hour})
	defer db.Close()
	clock := time.Unix(1_700_000_000, 0)
	db.now = func() time.Time { return clock }
	for i := range 30 {
		clock = clock.Add(time.Second)
		if _, err := db.Accept(fmt.Sprint("k", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := db.db.View(func(tx *bolt.Tx) error { n = tx.Bucket(bucketDedup).Stats().KeyN; return nil }); err != nil {
		t.Fatal(err)
	}
	if n > 11 {
		t.Fatalf("dedup window holds %d ids; bound is 10 (+10%% slack)", n)
	}
	if _, err := db.Accept("k29", nil); !errors.Is(err, ErrDuplicate) {
		t.Fatal("the newest id was forgotten")
	}
	clock = clock.Add(2 * time.Hour)
	if _, err := db.Accept("k29", nil); err != nil {
		t.Fatalf("an id older than the window is still refused: %v", err)
	}
}

func TestBrokenStateFileIsMovedAsideNotFatal(t *testing.T) {
	for name, damage := range map[string]func(path string) error{
		"truncated": func(p string) error { return os.Truncate(p, 100) },
		// Cut past the meta pages: bbolt would map the file and fault (SIGBUS) reading it.
		"cut to a third":         func(p string) error { fi, _ := os.Stat(p); return os.Truncate(p, fi.Size()/3) },
		"cut after the metadata": func(p string) error { return os.Truncate(p, 2*int64(os.Getpagesize())) },
		"garbage":                func(p string) error { return os.WriteFile(p, bytes.Repeat([]byte("not a bolt file "), 2000), 0o600) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			db, _ := open(t, dir, Limits{})
			if _, err := db.Accept("x", []byte("lost")); err != nil {
				t.Fatal(err)
			}
			db.Close()
			if err := damage(filepath.Join(dir, FileName)); err != nil {
				t.Fatal(err)
			}
			db, logs := open(t, dir, Limits{})
			defer db.Close()
			if !strings.Contains(logs.String(), "moved aside") || !strings.Contains(logs.String(), "recovered_messages=1") {
				t.Fatalf("no warning in the log, or not of the message recovered: %q", logs.String())
			}
			if strings.Contains(logs.String(), "missing or empty") {
				t.Fatalf("the broken file was also reported as a missing one: %q", logs.String())
			}
			// The message was still unanswered, and its record still in the intake log.
			assertPending(t, db, []string{"lost"})
			if copies, _ := filepath.Glob(filepath.Join(dir, LogName+".broken-*")); len(copies) != 1 {
				t.Fatalf("no copy of the intake log kept beside the broken file: %v", copies)
			}
			if _, err := db.Accept("y", []byte("new")); err != nil {
				t.Fatalf("fresh state does not serve: %v", err)
			}
			aside, _ := filepath.Glob(filepath.Join(dir, FileName+".broken-*"))
			if len(aside) != 1 {
				t.Fatalf("broken file not kept aside: %v", aside)
			}
		})
	}
}

func TestRememberedKeysAreBoundedAndSurviveReopen(t *testing.T) {
	dir := t.TempDir()
	db, _ := open(t, dir, Limits{})
	clock := time.Unix(1_700_000_000, 0)
	db.now = func() time.Time { return clock }
	for i := range 30 {
		clock = clock.Add(time.Second)
		if err := db.Remember("slack.threads", fmt.Sprint("C1:", i), 10, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := db.db.View(func(tx *bolt.Tx) error {
		n = tx.Bucket(bucketKeys).Bucket([]byte("slack.threads")).Stats().KeyN
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n > 11 {
		t.Fatalf("set holds %d keys; bound is 10 (+10%% slack)", n)
	}
	if ok, _ := db.Remembered("slack.threads", "C1:0", time.Hour); ok {
		t.Fatal("the oldest key beyond the bound is still remembered")
	}
	if ok, _ := db.Remembered("other", "C1:29", time.Hour); ok {
		t.Fatal("sets are not apart")
	}
	db.Close()
	db, _ = open(t, dir, Limits{})
	defer db.Close()
	db.now = func() time.Time { return clock }
	if ok, err := db.Remembered("slack.threads", "C1:29", time.Hour); err != nil || !ok {
		t.Fatalf("the newest key after reopen = %v %v; want remembered", ok, err)
	}
	clock = clock.Add(2 * time.Hour)
	if ok, _ := db.Remembered("slack.threads", "C1:29", time.Hour); ok {
		t.Fatal("a key older than the age is still remembered")
	}
}

// A state file the gateway may not open (left by a run as another user: root, then the
// service's own user) is not a broken one: Open fails naming it and the permission, and the
// file stays where it is with what it holds. It used to be moved aside as unreadable and a
// fresh state started, losing the journal and every chat's settings.
func TestOpenKeepsAStateFileItMayNotOpen(t *testing.T) {
	if os.Geteuid() == 0 {
		runAsNobody(t) // root opens any file: the case needs a user the file refuses
		return
	}
	dir := t.TempDir()
	db, _ := open(t, dir, Limits{})
	if err := db.SetSetting("telegram:42", "voice", "off"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	path := filepath.Join(dir, FileName)
	if err := os.Chmod(path, 0); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	if db, err := Open(dir, Limits{}, slog.New(slog.NewTextHandler(&logs, nil))); err == nil {
		db.Close()
		t.Fatal("Open succeeded on a file it may not open")
	} else if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("Open: %v; want the file named and the permission said", err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*.broken-*"))
	if len(left) > 0 || strings.Contains(logs.String(), "moved aside") {
		t.Errorf("the state was moved aside (%q); log:\n%s", left, logs.String())
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	db, _ = open(t, dir, Limits{})
	defer db.Close()
	if v, ok, err := db.Setting("telegram:42", "voice"); err != nil || !ok || v != "off" {
		t.Errorf("after the permission is fixed, the setting reads %q %v %v; want off", v, ok, err)
	}
}

// runAsNobody runs the calling test again in a copy of the test binary as user 65534, where
// file permissions apply, and fails with its output when it fails.
func runAsNobody(t *testing.T) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "state-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "state.test")
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^"+t.Name()+"$", "-test.count=1")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "TMPDIR=" + os.TempDir()}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("as user 65534: %v\n%s", err, out)
	}
}
