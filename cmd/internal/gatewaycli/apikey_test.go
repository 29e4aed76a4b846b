package gatewaycli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gateway/channels/channeltest"
)

// The warning check and run give for the global llm section with no key.
const (
	anthropicNoKey = `llm.api_key is not set: every request to Anthropic goes without a key, and Anthropic's API refuses it (profiles using it: assistant). ` +
		`Set llm.api_key in gateway.yaml, e.g. api_key: "${ANTHROPIC_API_KEY}", or the variable GATEWAY_LLM_API_KEY`
	anthropicKey = "sk-ant-never-shown"
)

// llm.provider anthropic with no llm.api_key passed check silently, and the first message
// then failed at the provider. check now warns, naming the key and where to set it, and
// still passes (exit 0): a warning, not a refusal. A key set anywhere ends the warning; the
// OpenAI key of the environment is no key for Anthropic; no key's value is ever printed.
func TestCheckWarnsOfAMissingAnthropicKey(t *testing.T) {
	const yamlText = "state_dir: ./data\nllm: {provider: anthropic, model: claude-sonnet-4-5}\n"
	for _, env := range []map[string]string{nil, {"OPENAI_API_KEY": "sk-openai-never-shown"}} {
		code, out := checkIn(t, yamlText, env)
		if code != 0 || !strings.Contains(out, "\nwarnings:\n  - "+anthropicNoKey+"\n") || !strings.Contains(out, "\nconfig OK") {
			t.Errorf("check with env %v: exit %d; want 0, the warning %q and config OK:\n%s", env, code, anthropicNoKey, out)
		}
		if strings.Contains(out, "never-shown") {
			t.Errorf("check printed a key:\n%s", out)
		}
	}
	for _, c := range []struct {
		yaml string
		env  map[string]string
	}{
		{yamlText, map[string]string{"GATEWAY_LLM_API_KEY": anthropicKey}},
		{"state_dir: ./data\nllm: {provider: anthropic, model: claude-sonnet-4-5, api_key: \"${ANTHROPIC_API_KEY}\"}\n", map[string]string{"ANTHROPIC_API_KEY": anthropicKey}},
	} {
		code, out := checkIn(t, c.yaml, c.env)
		if code != 0 || strings.Contains(out, "warnings:") || strings.Contains(out, anthropicKey) {
			t.Errorf("check with the key set: exit %d; want 0, no warning and no key shown:\n%s", code, out)
		}
	}
	// OpenAI's own endpoint refuses a request with no key as well; another server that
	// speaks its API (a local Ollama) is not assumed to need one.
	code, out := checkIn(t, "state_dir: ./data\nllm: {provider: openai}\n", nil)
	if want := "llm.api_key is not set: every request to OpenAI goes without a key, and OpenAI's API refuses it"; code != 0 || !strings.Contains(out, want) {
		t.Errorf("openai with no key: exit %d; want 0 and %q:\n%s", code, want, out)
	}
	code, out = checkIn(t, "state_dir: ./data\nllm: {provider: openai, base_url: \"http://127.0.0.1:11434/v1\", model: llama3.2}\n", nil)
	if code != 0 || strings.Contains(out, "warnings:") {
		t.Errorf("openai at a local server with no key: exit %d; want 0 and no warning:\n%s", code, out)
	}
}

// writeProfiles writes each profile's profile.yaml under root/profiles.
func writeProfiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, text := range files {
		dir := filepath.Join(root, "profiles", name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "profile.yaml"), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// A profile's chats run with the key they would be sent, by the rules a session follows:
// a profile that switches to anthropic inherits no key, nor does one with a base_url of its
// own, so check names each such profile without a key of its own, and its profile.yaml. A
// profile with a key of its own, or one that keeps the global provider and address (and so
// the global key), is not named; nor is a global section without a key that no profile uses
// without one.
func TestCheckWarnsOfAProfileWithoutAnthropicKey(t *testing.T) {
	dir := t.TempDir()
	writeProfiles(t, dir, map[string]string{
		"assistant": "description: keeps the global llm\n",
		"support":   "llm: {provider: anthropic, model: claude-sonnet-4-5}\n",
		"keyed":     "llm: {provider: anthropic, model: claude-sonnet-4-5, api_key: \"${MY_ANTHROPIC_KEY}\"}\n",
	})
	env := map[string]string{"MY_OPENAI_KEY": "sk-openai-never-shown", "MY_ANTHROPIC_KEY": anthropicKey}
	code, out := checkIn(t, "state_dir: ./data\nprofiles: {dir: "+filepath.Join(dir, "profiles")+"}\nllm: {provider: openai, api_key: \"${MY_OPENAI_KEY}\"}\n", env)
	want := "profile support: llm.api_key is not set: every request to Anthropic goes without a key, and Anthropic's API refuses it. " +
		"The profile has no llm.api_key of its own, and the global llm.api_key is not sent to a profile with another llm.provider. " +
		`Set llm.api_key in ` + filepath.Join(dir, "profiles", "support", "profile.yaml") + `, e.g. api_key: "${ANTHROPIC_API_KEY}"`
	if code != 0 || !strings.Contains(out, "\nwarnings:\n  - "+want+"\n") {
		t.Fatalf("check: exit %d; want 0 and the warning %q alone:\n%s", code, want, out)
	}
	if strings.Contains(out, "profile keyed") || strings.Contains(out, "profile assistant") || strings.Contains(out, "never-shown") {
		t.Errorf("check warned of a profile that has its key, or printed a key:\n%s", out)
	}

	// The global key is Anthropic's; a profile that sends its chats elsewhere is not given it.
	writeProfiles(t, dir, map[string]string{"support": "llm: {base_url: \"https://proxy.example/v1\"}\n"})
	env = map[string]string{"GATEWAY_LLM_API_KEY": anthropicKey, "MY_ANTHROPIC_KEY": anthropicKey}
	code, out = checkIn(t, "state_dir: ./data\nprofiles: {dir: "+filepath.Join(dir, "profiles")+"}\nllm: {provider: anthropic, model: claude-sonnet-4-5}\n", env)
	want = "profile support: llm.api_key is not set: every request to the Anthropic API at llm.base_url goes without a key. " +
		"The profile has no llm.api_key of its own, and the global llm.api_key is not sent to a profile with an llm.base_url of its own."
	if code != 0 || !strings.Contains(out, want) || strings.Contains(out, "proxy.example") || strings.Contains(out, anthropicKey) {
		t.Errorf("a profile with its own base_url: exit %d; want 0 and %q, with no address or key shown:\n%s", code, want, out)
	}
	if strings.Contains(out, "profile assistant") || strings.Contains(out, "profile keyed") || strings.Contains(out, "\n  - llm.api_key") {
		t.Errorf("check warned of a section that has its key:\n%s", out)
	}

	// Global anthropic with no key, but no profile uses it without a key of its own.
	writeProfiles(t, dir, map[string]string{
		"assistant": "llm: {api_key: \"${MY_ANTHROPIC_KEY}\"}\n",
		"support":   "llm: {provider: openai, model: gpt-4o-mini, base_url: \"http://127.0.0.1:11434/v1\"}\n",
	})
	code, out = checkIn(t, "state_dir: ./data\nprofiles: {dir: "+filepath.Join(dir, "profiles")+"}\nllm: {provider: anthropic, model: claude-sonnet-4-5}\n", map[string]string{"MY_ANTHROPIC_KEY": anthropicKey})
	if code != 0 || strings.Contains(out, "warnings:") {
		t.Errorf("every profile has its key: exit %d; want 0 and no warning:\n%s", code, out)
	}
}

// run starts with anthropic and no key (a warning is no refusal), and its log says what
// check says, once. A reload that brings in a profile without its key says so in the
// answer `gateway reload` prints and in the log. Then it stops as usual.
func TestRunWarnsOfAMissingAnthropicKey(t *testing.T) {
	t.Chdir(t.TempDir())
	addr := freePort(t)
	text := "state_dir: ./data\nhttp: {listen: \"" + addr + "\"}\nllm: {provider: anthropic, model: claude-sonnet-4-5}\n"
	if err := os.WriteFile("gateway.yaml", []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := &channeltest.LogBuffer{}
	done := make(chan int, 1)
	go func() { done <- Run(ctx, nil, []string{"run", "--config", "gateway.yaml"}, log, log, nil) }()
	waitFor(t, "the gateway listens", func() bool { return strings.Contains(log.String(), "listening") }, log)
	if got := strings.Count(log.String(), anthropicNoKey); got != 1 {
		t.Fatalf("run's log says %d times %q at the start; want once:\n%s", got, anthropicNoKey, log)
	}
	writeProfiles(t, "data", map[string]string{"proxy": "llm: {base_url: \"https://proxy.example/v1\"}\n"})
	code, out := cli(t, ctx, nil, "reload", "--config", "gateway.yaml")
	const proxyNoKey = "profile proxy: llm.api_key is not set: every request to the Anthropic API at llm.base_url goes without a key. " +
		"The profile has no llm.api_key of its own, and there is no global llm.api_key."
	if code != 0 || !strings.Contains(out, proxyNoKey) || strings.Contains(out, "proxy.example") {
		t.Errorf("gateway reload: exit %d; want 0 and %q, with no address shown:\n%s", code, proxyNoKey, out)
	}
	waitFor(t, "the reload is logged with the warning", func() bool { return strings.Contains(log.String(), "reload: "+proxyNoKey) }, log)
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("run: exit %d; want 0 (a missing key is no reason to stop):\n%s", code, log)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("run did not stop within 30s of its context:\n%s", log)
	}
}
