package harness_test

import (
	"bytes"
	"os"
	"testing"

	"gateway/harness"
	"gateway/harness/storetest"
)

func TestJSONLStoreBehaviour(t *testing.T) {
	var dir string
	open := func(t *testing.T) harness.SessionStore {
		dir = t.TempDir()
		st, err := harness.OpenStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	reopen := func(t *testing.T) harness.SessionStore {
		st, err := harness.OpenStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	storetest.Run(t, open, reopen)
}

// A store that is not a directory of files takes the harness's other path (whole logs read
// and appended through the interface): cluster mode's Postgres store is one.
func TestLogStoreBehaviour(t *testing.T) {
	var m *storetest.Memory
	storetest.Run(t,
		func(*testing.T) harness.SessionStore { m = storetest.NewMemory(); return m },
		func(*testing.T) harness.SessionStore { return m.Reopen() })
}

// A move of a history file cut by a crash after its copy was in place, before the old file
// was removed: done again, it removes the old file and leaves the copy as it is, so the
// conversation is neither lost nor in the new chat's file twice.
func TestJSONLMoveCutAfterItsCopyCompletesOnce(t *testing.T) {
	dir := t.TempDir()
	st, err := harness.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const from, to = "telegram:-8", "telegram:-1008"
	log := []byte("{\"type\":\"session\",\"version\":1,\"id\":\"h\",\"timestamp\":\"2025-01-01T00:00:00Z\",\"key\":\"telegram:-8\"}\n" +
		"{\"type\":\"message\",\"id\":\"a1\",\"parentId\":null,\"timestamp\":\"2025-01-01T00:00:01Z\",\"message\":{\"role\":\"user\",\"content\":\"my colour is blue\"}}\n")
	if err := st.AppendLog(from, log); err != nil {
		t.Fatal(err)
	}
	dst, _ := st.Path(to)
	copied := harness.Rekey(log, to)
	if err := os.WriteFile(dst, copied, 0o600); err != nil {
		t.Fatal(err)
	}
	if m, err := st.MoveLog(from, to); m != harness.LogMoved || err != nil {
		t.Fatalf("MoveLog = %v, %v; want moved", m, err)
	}
	if b, _ := st.ReadLog(to); !bytes.Equal(b, copied) {
		t.Fatalf("the new chat's history after the move was completed:\n%s\nwant\n%s", b, copied)
	}
	if b, _ := st.ReadLog(from); b != nil {
		t.Fatalf("the old chat's history is still there: %q", b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("the store holds %d files after the move; want the moved one alone", len(entries))
	}
}

// A move's copy left by a crash before its rename is removed when the store opens: it is
// nobody's history (the move is done again from the original), and would stay for good.
func TestLeftoverMoveCopyIsRemovedAtOpen(t *testing.T) {
	dir := t.TempDir()
	left := dir + "/.move-123456"
	if err := os.WriteFile(left, []byte("half a copy"), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := harness.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Fatalf("the leftover copy is still there: %v", err)
	}
}
