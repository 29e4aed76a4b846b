package gatewaycli

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// checkIn runs `gateway check --config gateway.yaml` in a fresh working folder holding that
// file, with exactly the environment given.
func checkIn(t *testing.T, yamlText string, env map[string]string, args ...string) (int, string) {
	t.Helper()
	t.Chdir(t.TempDir())
	if err := os.WriteFile("gateway.yaml", []byte(yamlText), 0o600); err != nil {
		t.Fatal(err)
	}
	return cli(t, context.Background(), env, append([]string{"check", "--config", "gateway.yaml"}, args...)...)
}

// shownConfig is check's printed config, flattened to dotted keys.
func shownConfig(t *testing.T, out string) map[string]any {
	t.Helper()
	body, _, _ := strings.Cut(out, "\nconfig OK")
	var m map[string]any
	if err := yaml.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("check's output is not YAML: %v\n%s", err, out)
	}
	return flatten(m, "")
}

// A limit the config leaves out, or sets to 0, is shown as the value run uses, marked as a
// default, not as 0.
func TestCheckShowsTheDefaultRunUses(t *testing.T) {
	code, out := checkIn(t, "state_dir: ./data\nsessions: {queue_size: 0}\n", nil)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	shown := shownConfig(t, out)
	for key, want := range map[string]any{"channels.web.max_upload_bytes": 20000000, "sessions.queue_size": 20, "llm.context_window": 8192} {
		if shown[key] != want {
			t.Errorf("%s shown as %v, want %v (the value run uses):\n%s", key, shown[key], want, out)
		}
	}
	for _, line := range []string{"max_upload_bytes: 20000000 # default", "queue_size: 20 # default"} {
		if !strings.Contains(out, line) {
			t.Errorf("check does not print %q:\n%s", line, out)
		}
	}
}

// Every number and duration of the config, set to 0, is shown as the default that 0 stands
// for: a limit whose default is filled in later and not shown by check fails here. Only
// the keys where 0 is itself the value used are exempt.
func TestCheckShowsNoZeroLimit(t *testing.T) {
	zeroMeans := map[string]string{
		"llm.max_retries": "no retries",
		"llm.max_tokens":  "the model's own limit (echo and openai send none)",
	}
	doc := map[string]any{}
	var keys []string
	for key, val := range flatten(configMap(defaultConfig(func(string) string { return "" }), false), "") {
		switch v := val.(type) {
		case int, int64, float64:
		case string:
			if _, err := time.ParseDuration(v); err != nil {
				continue
			}
		default:
			continue
		}
		keys = append(keys, key)
		m := doc
		parts := strings.Split(key, ".")
		for _, p := range parts[:len(parts)-1] {
			if m[p] == nil {
				m[p] = map[string]any{}
			}
			m = m[p].(map[string]any)
		}
		m[parts[len(parts)-1]] = 0
	}
	doc["state_dir"] = "./data"
	text, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	code, out := checkIn(t, string(text), nil)
	if code != 0 {
		t.Fatalf("exit %d with every limit 0:\n%s\n%s", code, text, out)
	}
	shown := shownConfig(t, out)
	for _, key := range keys {
		if _, ok := zeroMeans[key]; ok {
			continue
		}
		if s := fmt.Sprint(shown[key]); s == "0" || s == "0s" {
			t.Errorf("%s: 0 in the config is shown as %s, not as the default run uses", key, s)
		}
	}
	if len(keys) < 20 {
		t.Fatalf("only %d number keys found: %v", len(keys), keys)
	}
}

// A misspelt GATEWAY_ variable is an error naming it, in check and at startup, as an unknown
// key of the file is; its value (here a token) is never printed. The gateway's other
// GATEWAY_ variables, and one the file names as ${VAR}, are not keys and are let be.
func TestMisspeltVariableIsAnError(t *testing.T) {
	const secretValue = "123456:misspelt-secret-token"
	yamlText := "state_dir: ./data\nllm: {provider: openai, api_key: \"${GATEWAY_MY_OPENAI_KEY}\"}\n"
	env := map[string]string{
		"GATEWAY_TELEGRAM_TOKN":  secretValue,
		"GATEWAY_MY_OPENAI_KEY":  "sk-mine",
		"GATEWAY_LLM_MODEL":      "gpt-4o",
		"GATEWAY_CONFIG":         "gateway.yaml",
		"GATEWAY_API_URL":        "http://127.0.0.1:1/api/v1",
		"GATEWAY_API_TOKEN":      "api-token",
		"GATEWAY_HOOK_NAME":      "backup",
		"GATEWAY_NOT_SET_AT_ALL": "",
	}
	want := "GATEWAY_TELEGRAM_TOKN: unknown variable: no config key is set by it (did you mean GATEWAY_CHANNELS_TELEGRAM_TOKEN?)"
	code, out := checkIn(t, yamlText, env)
	problems := out[strings.Index(out, "problems:")+1:]
	if code != 1 || !strings.Contains(problems, want) {
		t.Fatalf("check: exit %d; want 1 and %q:\n%s", code, want, out)
	}
	if strings.Contains(out, secretValue) {
		t.Fatalf("check printed the misspelt variable's value:\n%s", out)
	}
	for name := range env {
		if name != "GATEWAY_TELEGRAM_TOKN" && strings.Contains(problems, name) {
			t.Errorf("check flagged %s, which is no misspelt key:\n%s", name, problems)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code, out = cli(t, ctx, env, "run", "--config", "gateway.yaml")
	if code != 1 || !strings.Contains(out, want) || strings.Contains(out, secretValue) {
		t.Fatalf("run: exit %d; want 1 and %q, and no token:\n%s", code, want, out)
	}
	delete(env, "GATEWAY_TELEGRAM_TOKN")
	if code, out := cli(t, context.Background(), env, "check", "--config", "gateway.yaml"); code != 0 {
		t.Fatalf("check without the misspelt variable: exit %d:\n%s", code, out)
	}
}

// A gateway.yaml that is not YAML (a key indented one space too far, or one too few) is
// reported with its file, its line and the cause in words, and nothing else is shown: no
// config, since none was read from the file, and the built-in defaults printed above the
// error read as what was checked. Every command that loads the file says the same and
// fails; a missing file too.
func TestUnparsableConfigShowsNoConfig(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"state_dir: ./data\nllm:\n  provider: anthropic\n   model: claude-sonnet-4-5\n",
			`gateway.yaml:4: not valid YAML: mapping values are not allowed in this context (a key indented more than the one above it, or a value with ": " in it that needs quotes)`},
		// The YAML library says line 3 for this one: the line before.
		{"state_dir: ./data\nllm:\n  provider: anthropic\n model: claude-sonnet-4-5\n",
			"gateway.yaml:4: not valid YAML: did not find expected key (this line is indented less than the keys above it, and more than the section they are in)"},
	}
	// What the defaults would have shown: the echo provider the file does not name, the
	// listen address, the "config OK" verdict.
	dump := []string{"provider: echo", "listen: 127.0.0.1:8080", "max_upload_bytes:", "config OK"}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, c := range cases {
		code, out := checkIn(t, c.yaml, nil)
		if code != 1 || !strings.Contains(out, c.want) {
			t.Errorf("check: exit %d; want 1 and %q:\n%s", code, c.want, out)
		}
		for _, line := range dump {
			if strings.Contains(out, line) {
				t.Errorf("check printed %q beside a file it could not read:\n%s", line, out)
			}
		}
		for _, args := range [][]string{{"run"}, {"hooks", "list"}, {"profiles", "list"}, {"reload"}} {
			code, out := cli(t, ctx, nil, append(args, "--config", "gateway.yaml")...)
			if code != 1 || !strings.Contains(out, c.want) {
				t.Errorf("gateway %s: exit %d; want 1 and %q:\n%s", strings.Join(args, " "), code, c.want, out)
			}
			for _, line := range append(dump, "listening") {
				if strings.Contains(out, line) {
					t.Errorf("gateway %s printed %q beside a file it could not read:\n%s", strings.Join(args, " "), line, out)
				}
			}
		}
	}
	code, out := cli(t, ctx, nil, "check", "--config", "missing.yaml")
	if code != 1 || !strings.Contains(out, "missing.yaml: cannot read the config file") || strings.Contains(out, "provider: echo") {
		t.Fatalf("check of a missing file: exit %d; want 1, the error, and no config:\n%s", code, out)
	}
}
