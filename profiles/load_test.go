package profiles

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"gateway/harness"
	"gateway/internal/secret"
)

// writeTree creates files under root; keys are slash paths, a trailing "/" makes a directory.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		path := filepath.Join(root, filepath.FromSlash(name))
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(path, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// loadErr loads a tree that must fail and returns the error text.
func loadErr(t *testing.T, files map[string]string, bindings []Binding) string {
	t.Helper()
	dir := t.TempDir()
	writeTree(t, dir, files)
	set, err := Load(Config{Dir: dir}, bindings)
	if err == nil {
		t.Fatalf("Load succeeded, want an error; profiles: %v", set.Names())
	}
	if set != nil {
		t.Errorf("Load returned a set along with its error")
	}
	return err.Error()
}

func mustContain(t *testing.T, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("error %q\ndoes not contain %q", got, w)
		}
	}
}

func TestLoadTree(t *testing.T) {
	t.Setenv("SUPPORT_KEY", "sk-support-123")
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"support/profile.yaml": `
description: Customer support
llm: {provider: anthropic, model: claude-x, base_url: "http://127.0.0.1:9/v1", api_key: "${SUPPORT_KEY}", context_window: 50000}
queue_mode: interrupt
vision: false
tools: [search, calculator]
stt: {language: de}
tts: {mode: always, voice: nova}
idle_reset: 30m
`,
		"support/SYSTEM.md":   "  You help customers of ACME.\n\n",
		"support/hooks/":      "",
		"coder/profile.yaml":  "queue_mode: steer\ntools: []\ntts: {language: fr}\n",
		"coder/SYSTEM.md":     "You write Go.",
		"assistant/SYSTEM.md": "Be nice.",
		"README.md":           "not a profile: files are ignored",
		".git/":               "",
	})
	set, err := Load(Config{Dir: dir, Default: "assistant"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := set.Names(), []string{"assistant", "coder", "support"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}

	s := set.Get("support")
	want := &Profile{
		Name:        "support",
		Dir:         filepath.Join(dir, "support"),
		Description: "Customer support",
		System:      "You help customers of ACME.",
		QueueMode:   QueueInterrupt,
		TextOnly:    true,
		Tools:       []string{"search", "calculator"},
		TTSMode:     TTSAlways,
		TTSVoice:    "nova",
		Language:    "de",
		TTSLanguage: "de", // falls back to stt.language
		IdleReset:   30 * time.Minute,
		HooksDir:    filepath.Join(dir, "support", "hooks"),
	}
	want.LLM.Provider, want.LLM.Model, want.LLM.BaseURL = "anthropic", "claude-x", "http://127.0.0.1:9/v1"
	want.LLM.APIKey, want.LLM.ContextWindow = secret.Secret("sk-support-123"), 50000
	if !reflect.DeepEqual(s, want) {
		t.Errorf("support profile:\n got %+v\nwant %+v", *s, *want)
	}
	if out := fmt.Sprintf("%+v %#v", *s, *s); strings.Contains(out, "sk-support-123") {
		t.Errorf("printing a profile shows its API key: %s", out)
	}

	c := set.Get("coder")
	if c.QueueMode != QueueSteer || c.TextOnly || c.System != "You write Go." || c.HooksDir != "" || c.TTSLanguage != "fr" || c.Language != "" {
		t.Errorf("coder profile: %+v", *c)
	}
	if c.Tools == nil || len(c.Tools) != 0 {
		t.Errorf("tools: [] should mean no tools (empty, non-nil), got %#v", c.Tools)
	}
	if c.LLM.APIKey.IsSet() || c.LLM.Provider != "" {
		t.Errorf("coder has no llm override, got %+v", c.LLM)
	}

	// The default has a directory without profile.yaml: its SYSTEM.md, every other setting default.
	d := set.Default()
	if d.Name != "assistant" || d.System != "Be nice." || d.QueueMode != "" || d.Tools != nil || d.Dir == "" {
		t.Errorf("default profile: %+v", *d)
	}
}

func TestLoadDefaultWithoutDirectoryIsBuiltin(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"other/SYSTEM.md": "x"})
	set, err := Load(Config{Dir: dir, Default: "helper"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := set.Default()
	if d.Name != "helper" || d.System != DefaultSystemPrompt || d.Dir != "" || d.QueueMode != "" {
		t.Errorf("default: %+v", *d)
	}
	if got := set.Names(); !reflect.DeepEqual(got, []string{"helper", "other"}) {
		t.Errorf("Names() = %v", got)
	}
}

func TestLoadMissingDirIsBuiltin(t *testing.T) {
	for _, cfg := range []Config{{Dir: filepath.Join(t.TempDir(), "nope")}, {}} {
		set, err := Load(cfg, nil)
		if err != nil {
			t.Fatalf("%+v: %v", cfg, err)
		}
		if got := set.Names(); !reflect.DeepEqual(got, []string{DefaultName}) {
			t.Errorf("%+v: Names() = %v, want only the builtin", cfg, got)
		}
		if d := set.Default(); d.System != DefaultSystemPrompt || d.Name != DefaultName {
			t.Errorf("%+v: default = %+v", cfg, *d)
		}
		if p := set.Resolve("telegram", "1", "", "2"); p != set.Default() {
			t.Errorf("%+v: unbound chat got %q", cfg, p.Name)
		}
	}
}

func TestLoadDirIsAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "profiles")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(Config{Dir: path}, nil)
	if err == nil {
		t.Fatal("want an error when profiles.dir is a file")
	}
	mustContain(t, err.Error(), "profiles.dir")
}

func TestLoadUnknownKey(t *testing.T) {
	msg := loadErr(t, map[string]string{
		"support/profile.yaml": "description: x\nllm:\n  modle: gpt\ntts: {mode: off}\nvoice: alloy\n",
	}, nil)
	path := filepath.Join("support", "profile.yaml")
	mustContain(t, msg, path+`:3: llm.modle: unknown key (known: provider, model, base_url, api_key, context_window)`, path+`:5: voice: unknown key`)
}

func TestLoadReportsEveryProblem(t *testing.T) {
	msg := loadErr(t, map[string]string{
		"a/profile.yaml":     "queue_mode: fast\nllm: {modle: x}\n",
		"b/profile.yaml":     "description: b\nidle_reset: 30 minutes\n",
		"c/profile.yaml":     "idle_reset: -5m\n",
		"d/profile.yaml":     "tts:\n  mode: sometimes\n",
		"e/profile.yaml":     "llm: {base_url: \"ftp://user:hunter2@example\"}\n",
		"f/profile.yaml":     "tools: [a, \"\", a]\n",
		"g/profile.yaml":     "tools: search\n",
		"h/profile.yaml":     "llm: sk-secret-value\n",
		"i/profile.yaml":     "- a list\n",
		"j/profile.yaml":     "description: [unclosed\n",
		"k/profile.yaml":     "llm: {context_window: 100}\n",
		"Bad.Name/SYSTEM.md": "x",
		"UPPER/":             "",
		"ok/SYSTEM.md":       "fine",
	}, []Binding{
		{Profile: "ok", Match: Match{Channel: "web"}},
		{Profile: "ghost", Match: Match{Chat: "1"}},
		{Match: Match{User: "2"}},
		{Profile: "a", Match: Match{Chat: "3"}}, // a is broken: reported once, as its file
	})
	mustContain(t, msg,
		filepath.Join("a", "profile.yaml")+`:1: queue_mode: "fast" is not a queue mode`,
		filepath.Join("a", "profile.yaml")+`:2: llm.modle: unknown key`,
		filepath.Join("b", "profile.yaml")+`:2: idle_reset: "30 minutes" is not a duration (write e.g. 90s, 30m or 2h)`,
		filepath.Join("c", "profile.yaml")+`:1: idle_reset: -5m0s is negative`,
		filepath.Join("d", "profile.yaml")+`:2: tts.mode: "sometimes" is not a TTS mode; use off, inbound or always`,
		filepath.Join("e", "profile.yaml")+`:1: llm.base_url: must be an http:// or https:// URL`,
		filepath.Join("f", "profile.yaml")+`:1: tools[1]: empty tool name`,
		filepath.Join("f", "profile.yaml")+`:1: tools[2]: tool "a" listed twice`,
		filepath.Join("g", "profile.yaml")+`:1: tools: expected a list, got text`,
		filepath.Join("h", "profile.yaml")+`:1: llm: expected a mapping, got text`,
		filepath.Join("i", "profile.yaml")+`:1: expected a mapping of keys, got a list`,
		filepath.Join("j", "profile.yaml")+`:1: not valid YAML: did not find expected`,
		filepath.Join("k", "profile.yaml")+`:1: llm.context_window: 100 tokens is too small to hold a conversation (at least 1024)`,
		`Bad.Name: invalid profile name "Bad.Name"`,
		`UPPER: invalid profile name "UPPER"`,
		`bindings[1].profile: unknown profile "ghost"; known profiles: assistant, ok`,
		`bindings[2].profile: missing`,
	)
	for _, leak := range []string{"hunter2", "sk-secret-value"} {
		if strings.Contains(msg, leak) {
			t.Errorf("error shows a secret value %q:\n%s", leak, msg)
		}
	}
	// Profiles with errors are not offered as binding targets.
	if strings.Contains(msg, "known profiles: a,") {
		t.Errorf("a broken profile is listed as known:\n%s", msg)
	}
	if strings.Contains(msg, "bindings[0]") || strings.Contains(msg, "bindings[3]") {
		t.Errorf("a valid binding was reported:\n%s", msg)
	}
}

func TestLoadBadDefaultName(t *testing.T) {
	_, err := Load(Config{Dir: t.TempDir(), Default: "../etc"}, nil)
	if err == nil {
		t.Fatal("want an error")
	}
	mustContain(t, err.Error(), `profiles.default: invalid profile name "../etc"`)
}

func TestLoadExpandsEnvironment(t *testing.T) {
	env := map[string]string{"GW_TEST_MODEL": "llama3", "GW_TEST_HOST": "127.0.0.1:11434", "GW_TEST_MODE": "collect"}
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"p/profile.yaml": `llm: {model: "${GW_TEST_MODEL}", base_url: "http://${GW_TEST_HOST}/v1", api_key: "pa$$word$GW_TEST_MODEL"}
queue_mode: ${GW_TEST_MODE}
tools: ["${GW_TEST_MODEL}-tool"]
`,
	})
	set, err := LoadWith(Config{Dir: dir}, nil, Options{Getenv: func(k string) string { return env[k] }})
	if err != nil {
		t.Fatal(err)
	}
	p := set.Get("p")
	if p.LLM.Model != "llama3" || p.LLM.BaseURL != "http://127.0.0.1:11434/v1" || p.QueueMode != QueueCollect {
		t.Errorf("not expanded: %+v", *p)
	}
	// One rule with gateway.yaml and HOOK.yaml: only ${VAR} expands.
	if got := p.LLM.APIKey.Reveal(); got != "pa$$word$GW_TEST_MODEL" {
		t.Errorf("api_key = %q, want %q (only ${VAR} expands)", got, "pa$$word$GW_TEST_MODEL")
	}
	if !reflect.DeepEqual(p.Tools, []string{"llama3-tool"}) {
		t.Errorf("tools = %v", p.Tools)
	}
}

// TestLoadUnsetVariableIsAnError: an unset ${VAR} in profile.yaml used to become "" silently
// (a profile with no API key, failing on every turn); now it is an error with file, line and key.
func TestLoadUnsetVariableIsAnError(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"p/profile.yaml": "description: x\nllm:\n  provider: openai\n  api_key: \"${GW_TEST_SURELY_UNSET}\"\n",
	})
	set, err := LoadWith(Config{Dir: dir}, nil, Options{Getenv: func(string) string { return "" }})
	if err == nil {
		t.Fatalf("loaded %v; want an error", set.Names())
	}
	mustContain(t, err.Error(), filepath.Join(dir, "p", "profile.yaml")+":4: llm.api_key: environment variable GW_TEST_SURELY_UNSET is not set")
}

// TestLoadChecksProviderModelAndTools: what would fail on every turn of a chat fails at load
// (and so in `gateway check`): an unknown provider, anthropic with no model, a tool the
// harness does not have.
func TestLoadChecksProviderModelAndTools(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"a/profile.yaml":  "llm: {provider: openia}\n",
		"b/profile.yaml":  "llm:\n  provider: anthropic\n",
		"c/profile.yaml":  "tools:\n  - current_time\n  - web_serch\n",
		"ok/profile.yaml": "llm: {provider: anthropic, model: claude-x}\ntools: [current_time]\n",
	})
	tools := func(names []string) ([]harness.Tool, error) { return harness.BuiltinTools(names) }
	_, err := LoadWith(Config{Dir: dir}, nil, Options{Tools: tools, LLM: &harness.Config{Provider: "openai", Model: "gpt-4o-mini"}})
	if err == nil {
		t.Fatal("want an error")
	}
	msg := err.Error()
	mustContain(t, msg,
		filepath.Join(dir, "a", "profile.yaml")+`:1: llm.provider: unknown provider "openia"`,
		filepath.Join(dir, "b", "profile.yaml")+`:2: llm.model: required with provider anthropic`,
		filepath.Join(dir, "c", "profile.yaml")+`:3: tools[1]: unknown tool "web_serch" (builtin tools: current_time)`,
	)
	if strings.Contains(msg, filepath.Join(dir, "ok")) || strings.Contains(msg, "current_time\"") {
		t.Errorf("a valid profile or tool was reported:\n%s", msg)
	}
}

func TestLoadEmptyProfileFile(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"p/profile.yaml": "# nothing yet\n", "p/SYSTEM.md": "   \n"})
	set, err := Load(Config{Dir: dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p := set.Get("p"); p.System != DefaultSystemPrompt || p.QueueMode != "" {
		t.Errorf("empty profile: %+v", *p)
	}
}

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"a", "support", "team-1", "x_y", "0", strings.Repeat("a", 64)} {
		if err := ValidateName(ok); err != nil {
			t.Errorf("ValidateName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "../x", "a/b", "a.b", "-a", "_a", "A", "é", "a b", strings.Repeat("a", 65)} {
		if err := ValidateName(bad); err == nil {
			t.Errorf("ValidateName(%q) = nil, want an error", bad)
		}
	}
}

// TestLoadRelativeDirGivesAbsoluteFolders: with the default relative profiles.dir, a
// profile's folder and hooks/ are absolute, so its hook programs (which run in their own
// folders) are found whatever the working directory.
func TestLoadRelativeDirGivesAbsoluteFolders(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{"data/profiles/alpha/hooks/": "", "data/profiles/alpha/SYSTEM.md": "Alpha."})
	t.Chdir(root)
	set, err := Load(Config{Dir: "./data/profiles"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(root, "data", "profiles", "alpha")
	if p := set.Get("alpha"); p == nil || p.Dir != want || p.HooksDir != filepath.Join(want, HooksSubdir) {
		t.Fatalf("alpha = %+v; want Dir %s and its hooks/ beside it, absolute", p, want)
	}
}
