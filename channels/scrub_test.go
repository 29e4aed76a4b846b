package channels

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestScrubberRemovesSecretsInEveryForm(t *testing.T) {
	const token = "123:AA/bb+cc"
	s := NewScrubber(token, "")
	sentinel := errors.New("unauthorized")
	inner := fmt.Errorf("post https://api.example/bot%s/getMe and bot123:AA%%2Fbb+cc: %w: %w", token, sentinel, context.Canceled)
	err := s.Wrap(inner, sentinel)
	if strings.Contains(err.Error(), "AA/bb") || strings.Contains(err.Error(), "AA%2Fbb") {
		t.Fatalf("secret left in %q", err)
	}
	if !errors.Is(err, sentinel) || !errors.Is(err, context.Canceled) {
		t.Fatalf("kinds lost: %v", err)
	}
	if errors.Is(err, inner) {
		t.Fatal("unwraps to the original error")
	}
	if s.Wrap(err) != err {
		t.Fatal("a scrubbed error was wrapped again")
	}
	if s.Wrap(nil) != nil {
		t.Fatal("Wrap(nil) is not nil")
	}
	if got := NewScrubber().String("plain"); got != "plain" {
		t.Fatal(got)
	}
}
