package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"gateway/channels/telegram/telegramtest"
	"gateway/cmd/internal/gatewaycli"
)

// asGatewayEnv makes the test binary the gateway: re-executed with it set, it runs
// gatewaycli.Run, the whole `gateway` command line, as cmd/gateway's main does.
const asGatewayEnv = "GATEWAY_BENCH_TEST_AS_GATEWAY"

// asFloorEnv makes the test binary the floor (--floor's child): runFloor, as main runs it.
const asFloorEnv = "GATEWAY_BENCH_TEST_AS_FLOOR"

func TestMain(m *testing.M) {
	if os.Getenv(asGatewayEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		// The variable that made this binary the gateway is not one of its config keys.
		env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, asGatewayEnv+"=") })
		code := gatewaycli.Run(ctx, nil, os.Args[1:], os.Stdout, os.Stderr, env)
		stop()
		os.Exit(code)
	}
	if os.Getenv(asFloorEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := runFloor(ctx, os.Args[2:], os.Stderr) // after floorArg
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestInProcessAnswersEveryMessageAndMeasures(t *testing.T) {
	// Paced as in production: one send a second per chat, so few messages per chat.
	res, err := Run(context.Background(), Options{Messages: 24, Chats: 12, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res.Answered != 24 || res.Failed != 0 {
		t.Fatalf("answered %d, failed %d; want all 24 answered", res.Answered, res.Failed)
	}
	if res.Mode != "in-process" || res.CPUPerMsg <= 0 || res.RSSReady <= 0 || res.RSSPeak < res.RSSReady*0.5 || res.AnonReady <= 0 || res.FileReady <= 0 || res.AnonPeak <= 0 || res.HeapPeak <= 0 || res.P99 < res.P50 || res.MsgsPerSec <= 0 {
		t.Fatalf("implausible figures: %+v", res)
	}
	var b strings.Builder
	WriteTable(&b, res)
	for _, want := range []string{"in-process", "gatewaycli.Run", "fake Bot API server", "24 (0 failed)", "ms/msg", "RSS", "RssAnon"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestModelDelayShowsInLatencyNotInAddedLatency(t *testing.T) {
	res, err := Run(context.Background(), Options{Messages: 8, Chats: 8, Warmup: -1, Provider: ProviderOpenAI, ModelDelay: 300 * time.Millisecond, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res.P50 < 300 {
		t.Fatalf("p50 %.1f ms with a 300 ms model", res.P50)
	}
	if d := res.AddedP99 - (res.P99 - 300); d > 0.01 || d < -0.01 {
		t.Fatalf("added p99 %.1f; want p99 %.1f less the 300 ms model", res.AddedP99, res.P99)
	}
}

// The snapshot is taken while the turns wait for the model: their goroutines are there.
func TestSnapshotShowsTheTurnsInFlight(t *testing.T) {
	res, err := Run(context.Background(), Options{Messages: 8, Chats: 8, Warmup: -1, Provider: ProviderOpenAI,
		ModelDelay: 2 * time.Second, SnapshotAt: time.Second, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	sn := res.Snapshot
	if sn == nil || sn.At != 1000 || sn.Anon <= 0 || sn.Stacks <= 0 || sn.HeapInuse <= 0 || sn.Goroutines < 8 {
		t.Fatalf("snapshot %+v; want one at 1 s with the 8 waiting turns", sn)
	}
	var b strings.Builder
	WriteTable(&b, res)
	if !strings.Contains(b.String(), "at 1s") || !strings.Contains(b.String(), "stacks") {
		t.Errorf("table lacks the snapshot:\n%s", b.String())
	}
}

func TestOpenLoopSendsAtTheRate(t *testing.T) {
	res, err := Run(context.Background(), Options{Messages: 20, Chats: 10, Rate: 50, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// 20 messages at 50/s take at least 380 ms from the first to the last.
	if res.Answered != 20 || res.Elapsed < 380 {
		t.Fatalf("answered %d in %.0f ms; want 20 in at least 380 ms", res.Answered, res.Elapsed)
	}
}

func TestOpenAIProviderPath(t *testing.T) {
	res, err := Run(context.Background(), Options{Messages: 10, Chats: 5, Provider: ProviderOpenAI, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res.Answered != 10 || res.Provider != ProviderOpenAI {
		t.Fatalf("%+v", res)
	}
}

func TestUnexpectedAnswersCountAsFailures(t *testing.T) {
	tr := newTracker(1)
	tr.round(2)
	st := tr.chats[firstChat]
	st.queue = []awaited{{tag: "msg-a", sent: time.Now()}, {tag: "msg-b", sent: time.Now()}}
	tr.onSent(telegramtest.Message{ChatID: firstChat, Text: "msg"})   // a preview: not yet
	tr.onSent(telegramtest.Message{ChatID: firstChat, Text: "msg-a"}) // the answer
	tr.onSent(telegramtest.Message{ChatID: 999, Text: "msg-b"})       // another chat: ignored
	tr.onSent(telegramtest.Message{ChatID: firstChat, Text: "Sorry, something went wrong"})
	samples, bad := tr.results()
	p, answered, failed := latencies(samples)
	if answered != 1 || failed != 1 || len(bad) != 1 || !strings.Contains(bad[0], "Sorry") || p.P50 <= 0 {
		t.Fatalf("answered %d failed %d bad %q", answered, failed, bad)
	}
	select {
	case <-tr.allDone:
	default:
		t.Fatal("both awaited answers were settled, but the round is not done")
	}
}

func TestBadOptionsAreNamed(t *testing.T) {
	_, err := Run(context.Background(), Options{Messages: -1, Chats: 20_000, Provider: "gpt", External: "/bin/true", CPUProfile: io.Discard})
	for _, want := range []string{"--messages", "--chats", "--provider", "in-process runs only"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
	_, err = Run(context.Background(), Options{ModelDelay: time.Second})
	for _, want := range []string{"--model-delay", "--provider openai"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
}

func TestProcReaders(t *testing.T) {
	m, err := readMem("self")
	if err != nil || m.RSS <= 0 || m.HWM < m.RSS {
		t.Fatalf("readMem: %+v, %v", m, err)
	}
	cpu, err := parseStatCPU([]byte("123 (a (weird) name) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0"))
	if err != nil || cpu != 3*time.Second {
		t.Fatalf("parseStatCPU = %v, %v; want 3s from 300 ticks", cpu, err)
	}
	if _, err := readCPU(os.Getpid()); err != nil {
		t.Fatal(err)
	}
}

// TestExternalMeasuresTheChild runs the external mode with the real gateway as the child:
// this test binary re-executed as gatewaycli.Run (see TestMain), which is all that
// cmd/gateway's main runs. (Building cmd/gateway here would take most of a minute.)
func TestExternalMeasuresTheChild(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	res, err := Run(context.Background(), Options{Messages: 20, Chats: 10, External: selfAs(t, asGatewayEnv), Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res.Mode != "external" || res.Answered != 20 || res.Failed != 0 || res.RSSReady <= 0 || res.AnonReady <= 0 || res.HeapReady <= 0 || res.GorReady <= 0 || res.CPUPerMsg <= 0 {
		t.Fatalf("%+v", res)
	}
	if !strings.Contains(res.Includes, "child process") {
		t.Fatalf("includes: %q", res.Includes)
	}
}

// TestFloorAnswersThroughTheModel runs --floor's child (this test binary as runFloor)
// with the OpenAI SDK against the fake model: every message is answered with the model's
// text, within Telegram's limits, and the child's own figures are read.
func TestFloorAnswersThroughTheModel(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	res, err := Run(context.Background(), Options{Messages: 20, Chats: 10, Provider: ProviderOpenAI,
		External: selfAs(t, asFloorEnv), Floor: true, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res.Answered != 20 || res.Failed != 0 || res.CPUPerMsg <= 0 || res.AnonReady <= 0 {
		t.Fatalf("%+v", res)
	}
	if !strings.Contains(res.Includes, "floor") || !strings.Contains(res.Mode, "floor") {
		t.Fatalf("the result does not say it measured the floor: %q, %q", res.Mode, res.Includes)
	}
}

// selfAs is a script that runs this test binary with env=1, as a child binary to measure.
func selfAs(t *testing.T, env string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(t.TempDir(), "gateway")
	body := fmt.Sprintf("#!/bin/sh\n%s=1 exec %q \"$@\"\n", env, exe)
	if err := os.WriteFile(script, []byte(body), 0o700); err != nil {
		t.Fatal(err)
	}
	return script
}
