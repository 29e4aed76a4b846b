package discord

import (
	"fmt"
	"testing"
	"time"
)

func TestCursorsBounds(t *testing.T) {
	now := time.Now()
	cs := cursors{}
	// Older than a day: not read after a lost session.
	cs.took("stale", "", "100", now.Add(-25*time.Hour))
	for i := range catchUpChats + 10 {
		cs.took(fmt.Sprint("c", i), "", fmt.Sprint(1000+i), now.Add(-time.Duration(catchUpChats+10-i)*time.Minute))
	}
	got := cs.recent(now)
	if len(got) != catchUpChats {
		t.Fatalf("recent lists %d chats; want the bound %d", len(got), catchUpChats)
	}
	if got[0].channel != fmt.Sprint("c", catchUpChats+9) {
		t.Errorf("first = %s; want the most recently active chat", got[0].channel)
	}
	for _, c := range got {
		if c.channel == "stale" || c.channel == "c0" {
			t.Errorf("%s listed: too old or beyond the bound", c.channel)
		}
	}

	cs.saw("c3", "999")  // older than the cursor: no move back
	cs.saw("c3", "1003") // same
	cs.saw("c3", "10000")
	cs.saw("elsewhere", "20000") // not active there: not tracked
	if c := cs["c3"]; c.last != "10000" {
		t.Errorf("c3 cursor = %s; want 10000", c.last)
	}
	if _, ok := cs["elsewhere"]; ok {
		t.Errorf("a chat the bot is not active in got a cursor")
	}

	full := cursors{}
	for i := range maxCursors + 5 {
		full.took(fmt.Sprint("k", i), "", fmt.Sprint(1000+i), now.Add(time.Duration(i)*time.Second))
	}
	if len(full) != maxCursors {
		t.Errorf("%d cursors kept; want at most %d", len(full), maxCursors)
	}
	if _, ok := full["k0"]; ok {
		t.Errorf("the least recently active chat was not the one forgotten")
	}
}

func TestSnowLess(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{{"", "1", true}, {"9", "10", true}, {"10", "9", false}, {"123", "124", true}, {"124", "124", false}} {
		if got := snowLess(c.a, c.b); got != c.want {
			t.Errorf("snowLess(%q, %q) = %v", c.a, c.b, got)
		}
	}
}

// A message the gateway refused holds its chat's cursor before it, whatever is taken after
// it, until it is taken itself; only a catch-up that gives up (skip) passes it.
func TestRefusedMessageHoldsTheCursor(t *testing.T) {
	now := time.Now()
	cs := cursors{}
	cs.took("dm", "", "1000", now)
	cs.refused("dm", "", "1005", now)
	cs.saw("dm", "1005") // the message itself, once handled
	cs.took("dm", "", "1007", now)
	if c := cs["dm"]; c.last != "1000" {
		t.Fatalf("cursor = %s after a refused 1005 and a taken 1007; want 1000, so that 1005 is read again", c.last)
	}
	cs.took("dm", "", "1005", now) // read again by a catch-up, and taken
	cs.saw("dm", "1007")
	if c := cs["dm"]; c.last != "1007" || c.held != "" {
		t.Fatalf("cursor = %s (held %q) once 1005 was taken; want 1007", c.last, c.held)
	}

	cs.refused("new", "", "2000", now) // a chat first seen with a refused message
	if got := cs.recent(now); len(got) != 2 || cs["new"].last != "1999" {
		t.Fatalf("cursor of a new chat = %q, recent %d; want 1999 and the chat read at the next catch-up", cs["new"].last, len(got))
	}
	cs.skip("new", "2050")
	if c := cs["new"]; c.last != "2050" || c.held != "" {
		t.Fatalf("cursor = %s (held %q) after a skip; want 2050", c.last, c.held)
	}
}
