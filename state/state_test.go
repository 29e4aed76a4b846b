package state

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
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

func TestJournalSurvivesReopenInOrder(t *testing.T) {
	dir := t.TempDir()
	db, _ := open(t, dir, Limits{})
	var seqs []uint64
	for i := range 3 {
		seq, err := db.Accept(fmt.Sprintf("telegram|1|%d", i), []byte(fmt.Sprintf("msg %d", i)))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	if err := db.Done(seqs[1]); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, _ = open(t, dir, Limits{})
	defer db.Close()
	got, err := db.Pending()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || string(got[0].Body) != "msg 0" || string(got[1].Body) != "msg 2" || got[0].Seq >= got[1].Seq {
		t.Fatalf("pending after reopen = %+v; want msg 0 then msg 2", got)
	}
	// The dedup window survived too: a redelivery of an answered message is refused.
	if _, err := db.Accept("telegram|1|1", []byte("again")); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("redelivery after restart = %v; want ErrDuplicate", err)
	}
	if seq, err := db.Accept("", []byte("no id")); err != nil || seq <= seqs[2] {
		t.Fatalf("Accept without a key = %d, %v", seq, err)
	}
}

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

func TestSettingsAndCursorsSurviveReopen(t *testing.T) {
	dir := t.TempDir()
	db, _ := open(t, dir, Limits{})
	if err := db.SetSetting("telegram:1", "voice", "off"); err != nil {
		t.Fatal(err)
	}
	if err := db.SetCursor("telegram.offset", "42"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db, _ = open(t, dir, Limits{})
	defer db.Close()
	if v, ok, err := db.Setting("telegram:1", "voice"); err != nil || !ok || v != "off" {
		t.Fatalf("voice = %q %v %v", v, ok, err)
	}
	if v, ok, _ := db.Cursor("telegram.offset"); !ok || v != "42" {
		t.Fatalf("cursor = %q %v", v, ok)
	}
	if err := db.DeleteSetting("telegram:1", "voice"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := db.Setting("telegram:1", "voice"); ok {
		t.Fatal("deleted setting still there")
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
			if !strings.Contains(logs.String(), "moved aside") {
				t.Fatalf("no warning in the log: %q", logs.String())
			}
			if p, _ := db.Pending(); len(p) != 0 {
				t.Fatalf("fresh state has %d entries", len(p))
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
