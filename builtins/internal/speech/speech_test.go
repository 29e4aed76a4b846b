package speech

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestProblemsNameTheKey(t *testing.T) {
	cases := []struct {
		provider, baseURL string
		command           []string
		isCommand         bool
		want              string // "" = no problem
	}{
		{"", "", nil, false, ""},
		{OpenAI, "http://127.0.0.1:9/v1", nil, false, ""},
		{Command, "", []string{"prog", "{input}"}, true, ""},
		{Command, "", []string{" "}, false, `x.command: is required with provider: command (e.g. [prog])`},
		{OpenAI, "", []string{"prog"}, false, "x.command: is only used with provider: command"},
		{"whisper", "", nil, false, `x.provider: "whisper" is not a provider`},
		{OpenAI, "localhost:8000", nil, false, `x.base_url: "localhost:8000" is not an http(s) URL`},
	}
	for _, c := range cases {
		p := NewProblems("x")
		isCommand := p.Provider(c.provider, c.command, "[prog]")
		p.BaseURL(c.baseURL)
		err := p.Err()
		switch {
		case isCommand != c.isCommand:
			t.Errorf("Provider(%q, %q) = %v, want %v", c.provider, c.command, isCommand, c.isCommand)
		case c.want == "" && err != nil:
			t.Errorf("%q %q %q: %v, want no problem", c.provider, c.command, c.baseURL, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%q %q %q: %v, want %q", c.provider, c.command, c.baseURL, err, c.want)
		}
	}
}

func TestSlotsWaitForAFreeOne(t *testing.T) {
	s := NewSlots()
	for range cap(s) {
		if err := s.Acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Acquire(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with every slot taken = %v, want the context's error", err)
	}
	s.Release()
	if err := s.Acquire(context.Background()); err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
}
