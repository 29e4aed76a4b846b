package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"gateway/internal/llm"
)

const (
	defaultToolTimeout = 30 * time.Second
	// maxToolOutput bounds what one tool run adds to the history.
	maxToolOutput = 64 << 10
)

// builtinTools are the tools a profile may name, by name. A func so that no mutable
// package state exists.
func builtinTools() map[string]func() Tool {
	return map[string]func() Tool{
		"current_time": func() Tool { return currentTime{now: time.Now} },
	}
}

// BuiltinTools returns the named builtin tools, in the order given. An unknown name is an
// error that names it and lists the known ones.
func BuiltinTools(names []string) ([]Tool, error) {
	known := builtinTools()
	out := make([]Tool, 0, len(names))
	seen := map[string]bool{}
	for _, n := range names {
		mk, ok := known[n]
		if !ok {
			all := make([]string, 0, len(known))
			for k := range known {
				all = append(all, k)
			}
			slices.Sort(all)
			return nil, fmt.Errorf("unknown tool %q (builtin tools: %s)", n, strings.Join(all, ", "))
		}
		if seen[n] {
			continue
		}
		seen[n] = true
		out = append(out, mk())
	}
	return out, nil
}

// currentTime tells the model the date and time, optionally in a given IANA zone.
type currentTime struct{ now func() time.Time }

func (currentTime) Def() llm.ToolDef {
	return llm.ToolDef{
		Name:        "current_time",
		Description: "Returns the current date, time and weekday. Optionally in an IANA time zone such as Europe/Berlin.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"timezone":{"type":"string","description":"IANA time zone name, e.g. America/New_York; default UTC"}}}`),
	}
}

func (t currentTime) Run(ctx context.Context, args json.RawMessage) (string, error) {
	var a struct {
		Timezone string `json:"timezone"`
	}
	if len(args) > 0 {
		if err := json.Unmarshal(args, &a); err != nil {
			return "", fmt.Errorf("arguments are not valid JSON: %v", err)
		}
	}
	loc := time.UTC
	if a.Timezone != "" {
		l, err := time.LoadLocation(a.Timezone)
		if err != nil {
			return "", fmt.Errorf("unknown time zone %q", a.Timezone)
		}
		loc = l
	}
	now := t.now().In(loc)
	return now.Format("Monday, 2006-01-02 15:04:05 MST (UTC-07:00)"), nil
}

// runTool runs one tool under a timeout. A tool error, panic or timeout becomes an error
// result for the model; nothing a tool does can crash the run. A tool that ignores its
// ctx is abandoned when the timeout passes (its goroutine ends when the tool returns).
func runTool(ctx context.Context, t Tool, args json.RawMessage, timeout time.Duration) (out string, isError bool) {
	if tt, ok := t.(TimeoutTool); ok && tt.Timeout() > 0 {
		timeout = tt.Timeout()
	}
	if timeout <= 0 {
		timeout = defaultToolTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- result{err: fmt.Errorf("the tool crashed: %v", p)}
			}
		}()
		o, err := t.Run(ctx, args)
		done <- result{o, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		r.err = ctx.Err()
	}
	if r.err != nil {
		var failed *ToolFailed
		switch {
		case errors.As(r.err, &failed):
			return clip(failed.Content, maxToolOutput), true
		case errors.Is(r.err, context.DeadlineExceeded):
			return fmt.Sprintf("error: the tool did not finish within %s", timeout), true
		case errors.Is(r.err, context.Canceled):
			return "error: the run was stopped before the tool finished", true
		}
		return "error: " + clip(r.err.Error(), 2000), true
	}
	return clip(r.out, maxToolOutput), false
}
