package gatewaycli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"gateway/channels/channeltest"
)

// cli runs the gateway command in-process in a temp dir with the given environment.
func cli(t *testing.T, ctx context.Context, env map[string]string, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	getenv := func(k string) string { return env[k] }
	code := run(ctx, nil, args, &out, &out, getenv, slices.Collect(maps.Keys(env)))
	return code, out.String()
}

func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "gateway.yaml")
	yaml = strings.ReplaceAll(yaml, "STATE", filepath.Join(dir, "data"))
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCheckNamesEachBadKey(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"unknown key", "state_dir: STATE\nchannels:\n  telegram:\n    tokn: abc\n", `.yaml:4: channels.telegram.tokn: unknown key (known: enabled, token, api_url, mode, webhook_secret, webhook_url, max_file_bytes, allow_from, dm_policy, require_mention)`},
		{"unknown top-level key", "state_dir: STATE\nllm_provider: openai\n", `.yaml:2: llm_provider: unknown key`},
		{"bad duration", "state_dir: STATE\nhooks:\n  timeout: soon\n", `.yaml:3: hooks.timeout: "soon" is not a duration`},
		{"missing token", "state_dir: STATE\nchannels:\n  telegram:\n    enabled: true\n", "channels.telegram.token"},
		{"bad queue mode", "state_dir: STATE\nsessions:\n  queue_mode: sometimes\n", ".yaml:3: sessions.queue_mode"},
		{"bad provider", "state_dir: STATE\nllm:\n  provider: skynet\n", "llm.provider"},
		{"negative media age", "state_dir: STATE\nmedia:\n  max_age: -1h\n", "media.max_age"},
		{"bad media size", "state_dir: STATE\nmedia:\n  max_bytes: lots\n", "media.max_bytes"},
		{"missing stt program", "state_dir: STATE\nstt:\n  enabled: true\n  provider: command\n  command: [no-such-stt-program, \"{input}\"]\n", "no-such-stt-program"},
		{"moved key", "state_dir: STATE\nstt:\n  echo_transcript: true\n", ".yaml:3: stt.echo_transcript: this key moved: write it as sessions.echo_transcript"},
		{"negative queue size", "state_dir: STATE\nsessions:\n  queue_size: -5\n", ".yaml:3: sessions.queue_size: must not be negative (0 takes the default, 20)"},
		{"negative turn timeout", "state_dir: STATE\nsessions:\n  turn_timeout: -1m\n", ".yaml:3: sessions.turn_timeout: must not be negative (0 takes the default, 10m0s)"},
		{"negative retries", "state_dir: STATE\nllm:\n  max_retries: -1\n", ".yaml:3: llm.max_retries: must not be negative"},
		{"binding to no channel", "state_dir: STATE\nbindings:\n  - profile: default\n    match: {channel: webb}\n", ".yaml:4: bindings[0].match.channel: \"webb\" is not one of telegram, discord, slack, web"},
		{"key twice", "state_dir: STATE\nsessions:\n  queue_size: 3\n  queue_size: 4\n", ".yaml:4: sessions.queue_size: given twice"},
		{"group id as a user", "state_dir: STATE\nchannels:\n  telegram:\n    enabled: true\n    token: \"1:x\"\n    allow_from: [\"-1001234567890\"]\n", `channels.telegram.allow_from[0]: "-1001234567890" is not a user id (a Telegram user id is a positive number`},
		// A secret from `openssl rand -base64`: check passed it and setWebhook refused it at start.
		{"webhook secret Telegram refuses", "state_dir: STATE\nchannels:\n  telegram:\n    enabled: true\n    token: \"1:x\"\n    mode: webhook\n    webhook_secret: \"q8T+xY/3kZ9=\"\n    webhook_url: https://bot.example.com/telegram/webhook\n", ".yaml:7: channels.telegram.webhook_secret: Telegram takes only"},
		{"plain http webhook", "state_dir: STATE\nchannels:\n  telegram:\n    enabled: true\n    token: \"1:x\"\n    mode: webhook\n    webhook_secret: s3cret\n    webhook_url: http://bot.example.com/telegram/webhook\n", ".yaml:8: channels.telegram.webhook_url: Telegram posts updates only to an https:// URL"},
		{"missing tts program", "state_dir: STATE\ntts:\n  mode: always\n  provider: command\n  command: [no-such-tts-program, -w, \"{output}\", \"{text}\"]\n", "no-such-tts-program"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out := cli(t, context.Background(), nil, "check", "--config", writeConfig(t, c.yaml))
			if code != 1 || !strings.Contains(out, c.want) {
				t.Fatalf("exit %d, output:\n%s\nwant exit 1 naming %s", code, out, c.want)
			}
		})
	}
}

func TestCheckMasksSecretsAndAppliesEnvironment(t *testing.T) {
	path := writeConfig(t, `state_dir: STATE
llm:
  provider: openai
  model: gpt-4o-mini
  api_key: "${MY_KEY}"
  base_url: "http://proxy:pass-in-url@127.0.0.1:1/v1?key=key-in-query"
channels:
  telegram:
    enabled: true
    token: "${TG_TOKEN}"
    allow_from: ["42"]
`)
	env := map[string]string{
		"MY_KEY":            "sk-very-secret-key",
		"TG_TOKEN":          "123456:telegram-secret-token",
		"GATEWAY_LLM_MODEL": "gpt-from-env",
	}
	code, out := cli(t, context.Background(), env, "check", "--config", path)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, secret := range []string{"sk-very-secret-key", "telegram-secret-token", "pass-in-url", "key-in-query"} {
		if strings.Contains(out, secret) {
			t.Fatalf("check printed a secret:\n%s", out)
		}
	}
	if !strings.Contains(out, "<redacted>") || !strings.Contains(out, "gpt-from-env") || !strings.Contains(out, "http://proxy:xxxxx@127.0.0.1:1/v1?key=xxxxx") {
		t.Fatalf("output lacks the masked secret or the env override:\n%s", out)
	}
}

// A list key set from the environment is read as a list when written as one, and split
// at commas otherwise.
func TestEnvironmentListsAsWrittenOrCommaSeparated(t *testing.T) {
	path := writeConfig(t, "state_dir: STATE\nchannels:\n  telegram:\n    enabled: true\n    token: \"123456:abcdefghijklmnopqrstuvwxyz\"\n")
	for _, val := range []string{`["1","2"]`, `[1, 2]`, `1, 2`} {
		code, out := cli(t, context.Background(), map[string]string{"GATEWAY_CHANNELS_TELEGRAM_ALLOW_FROM": val}, "check", "--config", path)
		if code != 0 {
			t.Fatalf("%s: exit %d:\n%s", val, code, out)
		}
		var got struct {
			Channels struct {
				Telegram struct {
					AllowFrom []string `yaml:"allow_from"`
				} `yaml:"telegram"`
			} `yaml:"channels"`
		}
		body, _, _ := strings.Cut(out, "\nconfig OK")
		if err := yaml.Unmarshal([]byte(body), &got); err != nil {
			t.Fatalf("%s: %v\n%s", val, err, out)
		}
		if a := got.Channels.Telegram.AllowFrom; len(a) != 2 || a[0] != "1" || a[1] != "2" {
			t.Fatalf("%s gave allow_from %q; want [1 2]", val, a)
		}
	}
}

func TestCheckPassesOnTheExampleConfig(t *testing.T) {
	env := map[string]string{"OPENAI_API_KEY": "sk-example", "TELEGRAM_BOT_TOKEN": "1:x", "DISCORD_BOT_TOKEN": "x", "SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APP_TOKEN": "xapp-1"}
	example := filepath.Join(repoRoot(t), "config.example.yaml")
	t.Chdir(t.TempDir()) // the example's relative paths land in the temp dir
	code, out := cli(t, context.Background(), env, "check", "--config", example)
	if code != 0 {
		t.Fatalf("config.example.yaml fails check (exit %d):\n%s", code, out)
	}
}

func repoRoot(t *testing.T) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(filepath.Dir(filepath.Dir(wd))) // cmd/internal/gatewaycli
}

func freePort(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestRunServesWebChatAndHealth is the README's run command in-process: with no provider
// configured it starts with the echo provider and serves the page and /healthz.
func TestRunServesWebChatAndHealth(t *testing.T) {
	addr := freePort(t)
	path := writeConfig(t, "state_dir: STATE\nhttp:\n  listen: "+addr+"\n")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var out bytes.Buffer
	go func() {
		done <- run(ctx, nil, []string{"--config", path}, io.Discard, &out, func(string) string { return "" }, nil)
	}()

	get := func(p string) (int, string) {
		resp, err := http.Get("http://" + addr + p)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		if code, _ := get("/readyz"); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready within 15s; log:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, body := get("/healthz"); code != 200 || !strings.Contains(body, "ok") {
		t.Fatalf("/healthz = %d %s", code, body)
	}
	if code, body := get("/"); code != 200 || !strings.Contains(body, "<html") {
		t.Fatalf("/ = %d, %.80s", code, body)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "gateway_messages_in_total") && !strings.Contains(body, "gateway_active_sessions") {
		t.Fatalf("/metrics = %d", code)
	}
	// Prometheus asks for gzip; the page is sent as it is (see gateway.Handler).
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ce := resp.Header.Get("Content-Encoding"); ce != "" || !strings.Contains(string(b), "go_goroutines") {
		t.Fatalf("/metrics asked for gzip: Content-Encoding %q, body %.80q", ce, b)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d after SIGTERM-equivalent; log:\n%s", code, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("did not shut down")
	}
	_ = fmt.Sprint
}

// A config file named as an argument instead of with --config is refused, naming the flag:
// check must not call the built-in defaults "config OK", nor run start on them and write its
// state where the admin did not ask.
func TestAConfigFileGivenAsAnArgumentIsRefused(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.WriteFile("prod.yaml", []byte("state_dir: ./state\nhttp: {listen: \"127.0.0.1:1\"}\nbogus: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A run that ignored its argument would serve until ctx ends: it has ended already.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, args := range [][]string{{"check", "prod.yaml"}, {"run", "prod.yaml"}, {"hooks", "list", "prod.yaml"}, {"reload", "prod.yaml"}} {
		code, out := cli(t, ctx, nil, args...)
		if code == 0 || !strings.Contains(out, "--config prod.yaml") || strings.Contains(out, "config OK") {
			t.Errorf("gateway %s: exit %d, output:\n%s\nwant a refusal naming --config prod.yaml", strings.Join(args, " "), code, out)
		}
	}
	if left := listTree(t, dir); !slices.Equal(left, []string{".", "prod.yaml"}) {
		t.Errorf("the working folder holds %q; want only prod.yaml", left)
	}
	// A misspelt subcommand is an error, not the group's help with exit status 0.
	if code, out := cli(t, ctx, nil, "hooks", "lst"); code == 0 || !strings.Contains(out, `unknown command "lst"`) {
		t.Errorf("gateway hooks lst: exit %d, output:\n%s", code, out)
	}
}

// TestListeningOnEveryInterfaceLogsAURLToOpen: with http.listen 0.0.0.0 (the Docker
// image's) the log said "listening url=http://[::]:8080", an address no browser opens.
// It names the loopback URL that reaches the gateway, beside the address it listens on.
func TestListeningOnEveryInterfaceLogsAURLToOpen(t *testing.T) {
	_, port, _ := net.SplitHostPort(freePort(t))
	path := writeConfig(t, "state_dir: STATE\nhttp: {listen: \"0.0.0.0:"+port+"\"}\nadmin: {token: admin-token-0123}\nchannels:\n  web: {token: web-token-0123}\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := &channeltest.LogBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, nil, []string{"run", "--config", path}, io.Discard, log, func(string) string { return "" }, nil)
	}()
	want := "url=http://127.0.0.1:" + port + " listen=0.0.0.0:" + port
	waitFor(t, "the gateway logs where it listens", func() bool { return strings.Contains(log.String(), want) }, log)
	resp, err := http.Get("http://127.0.0.1:" + port + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET the logged URL's /healthz: %v %v", resp, err)
	}
	resp.Body.Close()
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("run did not stop within 30s of its context:\n%s", log)
	}
}
