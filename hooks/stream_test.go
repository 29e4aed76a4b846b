package hooks

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gateway/internal/llm"
)

// A hook program observing "*" is not started once per streamed delta: it sees the whole
// answer in message_end. A program that lists message_update by name gets every delta, and
// an in-process observer (Bus.Observe) still sees everything.
func TestStarObserverSkipsStreamedDeltas(t *testing.T) {
	root := t.TempDir()
	logs := t.TempDir()
	write := func(name, events string) string {
		dir := filepath.Join(root, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		log := filepath.Join(logs, name+".log")
		yaml := "events: " + events + "\ncommand: [./run.sh]\n"
		script := "#!/bin/sh\n{ cat; echo; } >> '" + log + "'\n"
		if err := os.WriteFile(filepath.Join(dir, HookFile), []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "run.sh"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		return log
	}
	allLog := write("all", `["*"]`)
	updLog := write("updates", `[message_update]`)

	bus := NewBus(Options{Timeout: 10 * time.Second})
	d := LoadDir(bus, root, DirOptions{})
	defer d.Close()
	if errs := d.Errors(); len(errs) > 0 {
		t.Fatal(errs)
	}
	var seen atomic.Int32
	unsub := bus.Observe("test", func(context.Context, Event) { seen.Add(1) })
	defer unsub()

	s := Session{SessionKey: "web:1", Channel: "web", ChatID: "1"}
	const deltas = 5
	for i := range deltas {
		bus.Emit(ctxT(t), &MessageUpdate{Session: s, Delta: string(rune('a' + i))})
	}
	bus.Emit(ctxT(t), &MessageEnd{Session: s, Message: llm.Message{Role: llm.RoleAssistant, Content: "abcde"}})

	count := func(path, event string) int {
		b, err := os.ReadFile(path)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return strings.Count(string(b), `"`+event+`"`)
	}
	if n := count(allLog, NameMessageUpdate); n != 0 {
		t.Errorf(`the "*" program was started %d times for message_update; want 0`, n)
	}
	if n := count(allLog, NameMessageEnd); n != 1 {
		t.Errorf(`the "*" program saw message_end %d times; want 1`, n)
	}
	if n := count(updLog, NameMessageUpdate); n != deltas {
		t.Errorf("the program listing message_update saw %d deltas; want %d", n, deltas)
	}
	if n := seen.Load(); n != deltas+1 {
		t.Errorf("the in-process observer saw %d events; want %d", n, deltas+1)
	}
}
