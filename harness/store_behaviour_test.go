package harness_test

import (
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
