package channels

import (
	"fmt"
	"testing"
)

func TestDedupBoundedOldestForgotten(t *testing.T) {
	d := NewDedup(3)
	for _, k := range []string{"a", "b", "c"} {
		if d.Seen(k) {
			t.Fatalf("%s seen before it was recorded", k)
		}
	}
	if !d.Seen("a") || !d.Seen("c") {
		t.Fatal("a recorded key is not remembered")
	}
	if d.Seen("d") { // full: a, the oldest, goes
		t.Fatal("d seen before it was recorded")
	}
	if d.Seen("a") { // a was forgotten, so it is new again; b goes
		t.Fatal("the oldest key was not forgotten past the size")
	}
	if !d.Seen("c") || !d.Seen("d") || !d.Seen("a") {
		t.Fatal("the most recent keys are not all remembered")
	}
	if d.Seen("b") {
		t.Fatal("b should have been forgotten")
	}
	d.Forget("b")
	if d.Seen("b") {
		t.Fatal("a forgotten key is still seen")
	}
}

func TestDedupHoldsAtMostSize(t *testing.T) {
	d := NewDedup(100)
	for i := range 1000 {
		d.Seen(fmt.Sprint(i))
	}
	if len(d.seen) != 100 || len(d.ring) != 100 {
		t.Fatalf("holds %d keys in a ring of %d, want 100", len(d.seen), len(d.ring))
	}
	for i := 900; i < 1000; i++ {
		if !d.Seen(fmt.Sprint(i)) {
			t.Fatalf("%d, among the last 100, is not remembered", i)
		}
	}
}
