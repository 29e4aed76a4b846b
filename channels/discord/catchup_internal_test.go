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
