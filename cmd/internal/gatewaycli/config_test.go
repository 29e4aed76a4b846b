package gatewaycli

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"gateway/channels/telegram/telegramtest"
)

// TestExampleConfigPassesCheckWithNoVariables: a newcomer runs check on the shipped example
// with nothing set. The disabled channels' tokens and the unused OpenAI key must not matter.
func TestExampleConfigPassesCheckWithNoVariables(t *testing.T) {
	example := filepath.Join(repoRoot(t), "config.example.yaml")
	t.Chdir(t.TempDir())
	code, out := cli(t, context.Background(), nil, "check", "--config", example)
	if code != 0 || !strings.Contains(out, "config OK") {
		t.Fatalf("config.example.yaml with no variables: exit %d:\n%s", code, out)
	}
}

// TestCheckReportsEachUnsetVariableOnceWithItsKey: an unset ${VAR} is a problem only in a
// part that runs, reported once with its key path, together with every other problem.
func TestCheckReportsEachUnsetVariableOnceWithItsKey(t *testing.T) {
	path := writeConfig(t, `state_dir: STATE
http: {listen: 8080}
llm: {provider: openai, api_key: "${OPENAI_API_KEY}"}
stt: {api_key: "${OPENAI_API_KEY}"}
tts: {api_key: "${OPENAI_API_KEY}"}
channels:
  telegram: {enabled: true, token: "${TELEGRAM_BOT_TOKEN}"}
  discord: {enabled: false, token: "${DISCORD_BOT_TOKEN}"}
  slack: {bot_token: "${SLACK_BOT_TOKEN}", app_token: "${SLACK_APP_TOKEN}"}
`)
	code, out := cli(t, context.Background(), nil, "check", "--config", path)
	if code != 1 {
		t.Fatalf("exit %d; want 1:\n%s", code, out)
	}
	problems := out[strings.Index(out, "problems:"):]
	for want, n := range map[string]int{
		"llm.api_key: environment variable OPENAI_API_KEY is not set":                 1,
		"channels.telegram.token: environment variable TELEGRAM_BOT_TOKEN is not set": 1,
		"channels.telegram.token":              1, // not also "is required"
		"OPENAI_API_KEY":                       1, // speech is off without a key: not in use
		"DISCORD_BOT_TOKEN":                    0,
		"SLACK_":                               0,
		`http.listen: "8080" is not host:port`: 1,
	} {
		if got := strings.Count(problems, want); got != n {
			t.Errorf("%q appears %d times in the problems; want %d:\n%s", want, got, n, problems)
		}
	}
}

// TestCheckRejectsAListenAddressRunCannotUse: what check accepts, run can listen on.
func TestCheckRejectsAListenAddressRunCannotUse(t *testing.T) {
	for _, listen := range []string{"8080", `"localhost"`, `"127.0.0.1:http-alt:1"`, `"127.0.0.1:99999"`} {
		code, out := cli(t, context.Background(), nil, "check", "--config", writeConfig(t, "state_dir: STATE\nhttp: {listen: "+listen+"}\n"))
		if code != 1 || !strings.Contains(out[strings.Index(out, "\n")+1:], "http.listen: ") {
			t.Errorf("http.listen %s: exit %d; want 1 naming http.listen:\n%s", listen, code, out)
		}
	}
}

// TestPartialSpeechSectionKeepsItsDefaults: naming a provider turns speech on; the keys not
// given keep their defaults (issue 10: `stt: {provider: command, command: [...]}` without
// `enabled: true` silently turned speech to text off).
func TestPartialSpeechSectionKeepsItsDefaults(t *testing.T) {
	for _, tool := range []string{"ffmpeg", "ffprobe", "pocketsphinx_continuous", "espeak-ng"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	path := writeConfig(t, `state_dir: STATE
stt: {provider: command, command: [pocketsphinx_continuous, -infile, "{input}", -logfn, /dev/null]}
tts: {provider: command, command: [espeak-ng, -w, "{output}", "{text}"]}
`)
	cfg, err := loadChecked(path, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.STT.Enabled || cfg.STT.InputFormat != "" && cfg.STT.InputFormat != "wav" || cfg.STT.MaxBytes != 20_000_000 {
		t.Errorf("stt = %+v; want enabled with the default limits", cfg.STT)
	}
	if cfg.TTS.Mode != "inbound" || cfg.TTS.MaxChars != 1000 {
		t.Errorf("tts = %+v; want mode inbound with the default limits", cfg.TTS)
	}
	code, out := cli(t, context.Background(), nil, "check", "--config", path)
	stt := out[strings.Index(out, "\nstt:"):]
	if code != 0 || !strings.Contains(stt[:strings.Index(stt, "\ntts:")], "enabled: true") {
		t.Fatalf("check: exit %d; want config OK with stt enabled:\n%s", code, out)
	}

	// Without a provider that can run (openai, no key), speech stays off unless asked for.
	cfg, err = loadChecked(writeConfig(t, "state_dir: STATE\nstt: {model: whisper-1}\n"), func(string) string { return "" })
	if err != nil || cfg.STT.Enabled || cfg.TTS.Mode != "off" {
		t.Errorf("no key: stt enabled %v, tts mode %q, err %v; want both off", cfg.STT.Enabled, cfg.TTS.Mode, err)
	}
	// A local OpenAI-compatible server needs no key.
	cfg, err = loadChecked(writeConfig(t, "state_dir: STATE\nstt: {base_url: \"http://127.0.0.1:9/v1\"}\n"), func(string) string { return "" })
	if err != nil || !cfg.STT.Enabled {
		t.Errorf("local whisper server: stt enabled %v, err %v; want on", cfg.STT.Enabled, err)
	}
	// And explicit words win.
	cfg, err = loadChecked(writeConfig(t, "state_dir: STATE\nstt: {enabled: false, provider: command, command: [pocketsphinx_continuous, \"{input}\"]}\n"), func(string) string { return "" })
	if err != nil || cfg.STT.Enabled {
		t.Errorf("enabled: false: stt enabled %v, err %v; want off", cfg.STT.Enabled, err)
	}
}

// TestNonLoopbackListenNeedsTokens: a gateway other machines can reach is never an open
// bot: check fails and run refuses to start unless admin.token and channels.web.token are set.
func TestNonLoopbackListenNeedsTokens(t *testing.T) {
	for _, listen := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:8080"} {
		path := writeConfig(t, "state_dir: STATE\nhttp: {listen: \""+listen+"\"}\n")
		code, out := cli(t, context.Background(), nil, "check", "--config", path)
		problems := out[strings.Index(out, "problems:")+1:]
		if code != 1 || !strings.Contains(problems, "admin.token: required") || !strings.Contains(problems, "channels.web.token: required") {
			t.Errorf("check with http.listen %s and no tokens: exit %d; want both tokens asked for:\n%s", listen, code, out)
		}
		// A gateway that starts anyway runs until this context ends, and the test fails.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		code, out = cli(t, ctx, nil, "run", "--config", path)
		cancel()
		if code != 1 || !strings.Contains(out, "admin.token") || !strings.Contains(out, "channels.web.token") {
			t.Errorf("run with http.listen %s and no tokens: exit %d; want a refusal naming both tokens:\n%s", listen, code, out)
		}
	}
	env := map[string]string{"GATEWAY_ADMIN_TOKEN": "admin-secret-1234", "GATEWAY_CHANNELS_WEB_TOKEN": "web-secret-5678"}
	path := writeConfig(t, "state_dir: STATE\nhttp: {listen: \"0.0.0.0:0\"}\n")
	if code, out := cli(t, context.Background(), env, "check", "--config", path); code != 0 || strings.Contains(out, "secret-") {
		t.Errorf("with both tokens: exit %d (want 0, tokens masked):\n%s", code, out)
	}
	// Without the web chat only the admin token is needed.
	path = writeConfig(t, "state_dir: STATE\nhttp: {listen: \"0.0.0.0:0\"}\nadmin: {token: abc}\nchannels:\n  web: {enabled: false}\n  telegram: {enabled: true, token: \"1:x\"}\n")
	if code, out := cli(t, context.Background(), nil, "check", "--config", path); strings.Contains(out, "channels.web.token") || strings.Contains(out, "admin.token: required") {
		t.Errorf("web chat off, admin token set: exit %d:\n%s", code, out)
	}
	// Loopback needs nothing.
	if code, out := cli(t, context.Background(), nil, "check", "--config", writeConfig(t, "state_dir: STATE\nhttp: {listen: \"localhost:0\"}\n")); code != 0 {
		t.Errorf("localhost: exit %d:\n%s", code, out)
	}
}

// TestLogFileIsPlainText: stderr redirected to a file gets no colour codes, each attribute
// once per line, and a clean shutdown logs no empty error.
func TestLogFileIsPlainText(t *testing.T) {
	tg := telegramtest.NewServer(t)
	defer tg.Close()
	addr := freePort(t)
	path := writeConfig(t, "state_dir: STATE\nhttp: {listen: \""+addr+"\"}\nchannels:\n  telegram: {enabled: true, token: \""+tg.Token+"\", api_url: \""+tg.URL+"\"}\n")
	logFile, err := os.Create(filepath.Join(t.TempDir(), "gateway.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, nil, []string{"run", "--config", path}, io.Discard, logFile, func(string) string { return "" }, nil)
	}()
	read := func() string {
		b, _ := os.ReadFile(logFile.Name())
		return string(b)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(read(), "telegram connected") || !strings.Contains(read(), "gateway started") {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("the gateway did not start within 20s; log:\n%s", read())
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	select {
	case code := <-exited:
		if code != 0 {
			t.Fatalf("exit %d; log:\n%s", code, read())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("did not shut down within 30s")
	}
	log := read()
	if strings.Contains(log, "\x1b[") {
		t.Errorf("the log file has colour codes:\n%q", log)
	}
	if strings.Contains(log, `err=""`) {
		t.Errorf("a clean shutdown logged an empty error:\n%s", log)
	}
	keyRe := regexp.MustCompile(`(?:^| )([a-z_.]+)=`)
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		seen := map[string]bool{}
		for _, m := range keyRe.FindAllStringSubmatch(line, -1) {
			if seen[m[1]] {
				t.Errorf("%s= twice in one line: %s", m[1], line)
			}
			seen[m[1]] = true
		}
	}
	if !hasLine(log, "telegram connected", "channel=telegram") {
		t.Errorf("no line says telegram connected with channel=telegram:\n%s", log)
	}
}

// TestLLMSectionKeepsItsProvidersDefaults: naming a provider does not inherit the model or
// key of the default one (the echo model sent to OpenAI, the OpenAI key sent to Anthropic).
func TestLLMSectionKeepsItsProvidersDefaults(t *testing.T) {
	cfg, err := loadChecked(writeConfig(t, "state_dir: STATE\nllm: {provider: openai, api_key: sk-x}\n"), func(string) string { return "" })
	if err != nil || cfg.LLM.Model != "gpt-4o-mini" {
		t.Errorf("openai named, no OPENAI_API_KEY: model %q, err %v; want gpt-4o-mini", cfg.LLM.Model, err)
	}
	env := map[string]string{"OPENAI_API_KEY": "sk-openai-secret"}
	cfg, err = loadChecked(writeConfig(t, "state_dir: STATE\nllm: {provider: anthropic, model: claude-sonnet-4-5}\n"), func(k string) string { return env[k] })
	if err != nil || cfg.LLM.APIKey.IsSet() {
		t.Errorf("anthropic with OPENAI_API_KEY set: api_key set %v, err %v; want the OpenAI key kept away", cfg.LLM.APIKey.IsSet(), err)
	}
	code, out := cli(t, context.Background(), env, "check", "--config", writeConfig(t, "state_dir: STATE\nllm: {provider: anthropic}\n"))
	if code != 1 || !strings.Contains(out, "llm.model: required") {
		t.Errorf("anthropic without a model: exit %d:\n%s", code, out)
	}
}

// TestModelSectionWithoutProviderIsNotEcho: an Ollama section written without provider:
// openai (a model and a base_url) ran the echo provider when OPENAI_API_KEY was not set,
// with check saying "config OK" and every chat answered "no model is configured"; with the
// variable set, the same file reached Ollama. A section that asks for a model gets one.
func TestModelSectionWithoutProviderIsNotEcho(t *testing.T) {
	noEnv := func(string) string { return "" }
	for _, c := range []struct{ yaml, provider, model string }{
		{"llm: {model: llama3.2, base_url: \"http://127.0.0.1:11434/v1\"}\n", "openai", "llama3.2"},
		{"llm: {base_url: \"http://127.0.0.1:11434/v1\"}\n", "openai", "gpt-4o-mini"},
		{"llm: {model: gpt-4o, api_key: sk-x}\n", "openai", "gpt-4o"},
		{"llm: {timeout: 1m}\n", "echo", "echo"}, // nothing asks for a model
		{"llm: {model: echo}\n", "echo", "echo"},
	} {
		cfg, err := loadChecked(writeConfig(t, "state_dir: STATE\n"+c.yaml), noEnv)
		if err != nil || cfg.LLM.Provider != c.provider || cfg.LLM.Model != c.model {
			t.Errorf("%s→ provider %q model %q, err %v; want %s %s", c.yaml, cfg.LLM.Provider, cfg.LLM.Model, err, c.provider, c.model)
		}
	}
	// The README's Ollama line, left without GATEWAY_LLM_PROVIDER.
	t.Chdir(t.TempDir())
	env := map[string]string{"GATEWAY_LLM_BASE_URL": "http://127.0.0.1:11434/v1", "GATEWAY_LLM_MODEL": "llama3.2"}
	code, out := cli(t, context.Background(), env, "check")
	if code != 0 || !strings.Contains(out, "provider: openai") || strings.Contains(out, "provider: echo") {
		t.Errorf("GATEWAY_LLM_BASE_URL and GATEWAY_LLM_MODEL alone: exit %d; want provider openai:\n%s", code, out)
	}
	// A model named without a key for OpenAI's API is told so, not silently echoed.
	code, out = cli(t, context.Background(), nil, "check", "--config", writeConfig(t, "state_dir: STATE\nllm: {model: gpt-4o}\n"))
	if code != 0 || !strings.Contains(out, "llm.api_key is not set") {
		t.Errorf("llm: {model: gpt-4o} with no key: exit %d; want the missing key's warning:\n%s", code, out)
	}
}

// TestCheckRefusesAModelAddressRunCannotUse: the global llm section is checked as a
// profile's is. An Ollama address written without http:// used to pass `check` and start,
// and then every message failed with "unsupported protocol scheme".
func TestCheckRefusesAModelAddressRunCannotUse(t *testing.T) {
	path := writeConfig(t, "state_dir: STATE\nllm:\n  provider: openai\n  model: llama3.2\n  base_url: localhost:11434/v1\n  context_window: 100\n")
	code, out := cli(t, context.Background(), nil, "check", "--config", path)
	if code != 1 {
		t.Fatalf("check: exit %d; want 1:\n%s", code, out)
	}
	for _, want := range []string{
		path + ":5: llm.base_url: must be an http:// or https:// URL",
		path + ":6: llm.context_window: 100 tokens is too small",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	env := map[string]string{"GATEWAY_LLM_BASE_URL": "127.0.0.1:11434/v1"}
	code, out = cli(t, context.Background(), env, "check", "--config", writeConfig(t, "state_dir: STATE\nllm: {provider: openai, model: llama3.2}\n"))
	if code != 1 || !strings.Contains(out, "GATEWAY_LLM_BASE_URL: llm.base_url: must be an http:// or https:// URL") {
		t.Errorf("base_url from the environment: exit %d:\n%s", code, out)
	}
	code, out = cli(t, context.Background(), nil, "check", "--config", writeConfig(t, "state_dir: STATE\nllm: {provider: openai, model: llama3.2, base_url: \"http://127.0.0.1:11434/v1\", context_window: 1024}\n"))
	if code != 0 {
		t.Errorf("a well-formed address: exit %d:\n%s", code, out)
	}
}

// TestBindingToAMissingProfileNamesItsLine: a binding that names no existing profile is
// reported with the line of gateway.yaml that says it (or the variable that set it), as
// every other problem of the file is, by check, profiles list and run alike.
func TestBindingToAMissingProfileNamesItsLine(t *testing.T) {
	path := writeConfig(t, "state_dir: STATE\nprofiles: {dir: STATE/profiles}\nbindings:\n  - profile: assistant\n    match: {channel: web}\n  - profile: suport\n    match: {channel: slack}\n")
	want := path + `:6: bindings[1].profile: unknown profile` // run's log quotes the name
	for _, args := range [][]string{{"check"}, {"profiles", "list"}, {"run"}} {
		code, out := cli(t, context.Background(), nil, append(args, "--config", path)...)
		if code != 1 || !strings.Contains(out, want) {
			t.Errorf("%v: exit %d; want 1 and %q in:\n%s", args, code, want, out)
		}
	}
	env := map[string]string{"GATEWAY_BINDINGS": "[{profile: ghost}]"}
	code, out := cli(t, context.Background(), env, "check", "--config", path)
	if want := `GATEWAY_BINDINGS: bindings[0].profile: unknown profile "ghost"`; code != 1 || !strings.Contains(out, want) {
		t.Errorf("bindings from the environment: exit %d; want 1 and %q in:\n%s", code, want, out)
	}
}

// TestProfilesListNeedsNoPlatformToken: `gateway profiles list` in an admin's shell, where
// the bot token and model key of the service's environment are not set, refused to list
// anything for those two ${VAR}s, which the profiles and bindings do not use. check still
// reports them.
func TestProfilesListNeedsNoPlatformToken(t *testing.T) {
	path := writeConfig(t, "state_dir: STATE\nllm: {provider: openai, api_key: \"${MY_OPENAI_KEY}\"}\n"+
		"channels:\n  telegram: {enabled: true, token: \"${TELEGRAM_BOT_TOKEN}\", allow_from: [\"42\"]}\n"+
		"profiles: {dir: STATE/profiles}\nbindings:\n  - profile: support\n    match: {channel: telegram, chat: \"-100123\"}\n")
	if err := os.MkdirAll(filepath.Join(filepath.Dir(path), "data", "profiles", "support"), 0o755); err != nil {
		t.Fatal(err)
	}
	code, out := cli(t, context.Background(), nil, "profiles", "list", "--config", path)
	if code != 0 || !strings.Contains(out, "support") || !strings.Contains(out, `chat="-100123"`) {
		t.Errorf("profiles list without the token's variable: exit %d; want the profiles listed:\n%s", code, out)
	}
	code, out = cli(t, context.Background(), nil, "check", "--config", path)
	if code != 1 || !strings.Contains(out, "TELEGRAM_BOT_TOKEN is not set") {
		t.Errorf("check without the token's variable: exit %d; want it reported:\n%s", code, out)
	}
	// An unset variable the bindings use is the list's to report.
	path = writeConfig(t, "state_dir: STATE\nbindings:\n  - profile: \"${SUPPORT_PROFILE}\"\n")
	if code, out := cli(t, context.Background(), nil, "profiles", "list", "--config", path); code != 1 || !strings.Contains(out, "SUPPORT_PROFILE is not set") {
		t.Errorf("profiles list with a binding's variable unset: exit %d:\n%s", code, out)
	}
}

// TestOpenAIKeyFromTheEnvironmentIsTheKeySent: README's "set OPENAI_API_KEY and it uses
// gpt-4o-mini". The default key was the text "${OPENAI_API_KEY}", which nothing expands (it
// is no value of the file), so every request to OpenAI carried those 17 characters as its
// key and was refused: the gateway's first-run path answered every message with an error.
func TestOpenAIKeyFromTheEnvironmentIsTheKeySent(t *testing.T) {
	env := map[string]string{"OPENAI_API_KEY": "sk-openai-secret"}
	getenv := func(k string) string { return env[k] }
	for _, path := range []string{"", writeConfig(t, "state_dir: STATE\n"), writeConfig(t, "state_dir: STATE\nllm: {model: gpt-4o}\n")} {
		cfg, err := loadChecked(path, getenv)
		if err != nil {
			t.Fatalf("%q: %v", path, err)
		}
		if got := cfg.LLM.APIKey.Reveal(); got != "sk-openai-secret" {
			t.Errorf("config %q with OPENAI_API_KEY set: the model is sent the key %q; want the variable's value", path, got)
		}
	}
	// check still shows no secret.
	if code, out := cli(t, context.Background(), env, "check", "--config", writeConfig(t, "state_dir: STATE\n")); code != 0 || strings.Contains(out, "sk-openai-secret") {
		t.Errorf("check: exit %d, output shows the key: %v\n%s", code, strings.Contains(out, "sk-openai-secret"), out)
	}
}

// TestOpenAIKeyStaysWithOpenAI: the README's Ollama line (GATEWAY_LLM_BASE_URL and a model)
// run in a shell that also has OPENAI_API_KEY sent that key in every request to the other
// server, be it a local Ollama or a third party such as Groq or OpenRouter. The default key
// now goes only to OpenAI's endpoint; a key the config names is sent where it says.
func TestOpenAIKeyStaysWithOpenAI(t *testing.T) {
	env := map[string]string{"OPENAI_API_KEY": "sk-openai-secret"}
	getenv := func(k string) string { return env[k] }
	for _, c := range []struct {
		yaml string
		key  string
	}{
		{"state_dir: STATE\nllm: {provider: openai, base_url: \"http://127.0.0.1:11434/v1\", model: llama3.2}\n", ""},
		{"state_dir: STATE\nllm: {base_url: \"https://api.groq.com/openai/v1\", model: llama3}\n", ""},
		{"state_dir: STATE\nllm: {base_url: \"https://api.groq.com/openai/v1\", api_key: \"${OPENAI_API_KEY}\"}\n", "sk-openai-secret"},
		{"state_dir: STATE\nllm: {base_url: \"https://api.openai.com/v1\"}\n", "sk-openai-secret"},
	} {
		cfg, err := loadChecked(writeConfig(t, c.yaml), getenv)
		if err != nil {
			t.Fatalf("%s: %v", c.yaml, err)
		}
		if got := cfg.LLM.APIKey.Reveal(); got != c.key {
			t.Errorf("%s: api_key %q; want %q", c.yaml, got, c.key)
		}
	}
	env["GATEWAY_LLM_BASE_URL"] = "http://127.0.0.1:11434/v1"
	env["GATEWAY_LLM_MODEL"] = "llama3.2"
	cfg, err := loadChecked("", getenv)
	if err != nil || cfg.LLM.APIKey.IsSet() {
		t.Errorf("the README's Ollama line with OPENAI_API_KEY set: api_key set %v, err %v; want no key", cfg.LLM.APIKey.IsSet(), err)
	}
}

// TestSpeechKeyStaysWithOpenAI: speech sections without a key of their own used to leave
// the key to the OpenAI SDK, which read OPENAI_API_KEY from the environment and sent it to
// any server: a local Whisper or TTS server named by base_url got the OpenAI key. The
// environment's key now goes to OpenAI's API only, as llm's does.
func TestSpeechKeyStaysWithOpenAI(t *testing.T) {
	env := map[string]string{"OPENAI_API_KEY": "sk-openai-secret"}
	getenv := func(k string) string { return env[k] }
	for _, c := range []struct {
		yaml string
		key  string
	}{
		{"state_dir: STATE\n", "sk-openai-secret"},
		{"state_dir: STATE\nstt: {base_url: \"https://api.openai.com/v1\"}\ntts: {base_url: \"https://api.openai.com/v1\"}\n", "sk-openai-secret"},
		{"state_dir: STATE\nstt: {base_url: \"http://127.0.0.1:8000/v1\"}\ntts: {base_url: \"http://127.0.0.1:8000/v1\"}\n", ""},
		{"state_dir: STATE\nstt: {base_url: \"http://127.0.0.1:8000/v1\", api_key: local-key}\ntts: {base_url: \"http://127.0.0.1:8000/v1\", api_key: local-key}\n", "local-key"},
	} {
		cfg, err := loadChecked(writeConfig(t, c.yaml), getenv)
		if err != nil {
			t.Fatalf("%s: %v", c.yaml, err)
		}
		if stt, tts := cfg.STT.APIKey.Reveal(), cfg.TTS.APIKey.Reveal(); stt != c.key || tts != c.key {
			t.Errorf("%s: stt api_key %q, tts api_key %q; want %q", c.yaml, stt, tts, c.key)
		}
	}
}

// TestCheckValidatesProfiles: a profile that would fail on every turn of its chats (a tool
// the harness does not have, an unknown provider, a typo in a key, an unset variable) fails
// `gateway check`, each problem with its file, line and key.
func TestCheckValidatesProfiles(t *testing.T) {
	root := t.TempDir()
	profs := filepath.Join(root, "profiles")
	writeFile(t, filepath.Join(profs, "support", "profile.yaml"), "description: help desk\ntools:\n  - web_serch\n")
	writeFile(t, filepath.Join(profs, "other", "profile.yaml"), "llm:\n  provider: skynet\n  modle: x\n  api_key: \"${OTHER_KEY}\"\n")
	path := filepath.Join(root, "gateway.yaml")
	writeFile(t, path, "state_dir: "+filepath.Join(root, "data")+"\nprofiles: {dir: "+profs+"}\nhooks: {dirs: []}\n")
	code, out := cli(t, context.Background(), nil, "check", "--config", path)
	if code != 1 {
		t.Fatalf("check: exit %d; want 1:\n%s", code, out)
	}
	for _, want := range []string{
		filepath.Join(profs, "support", "profile.yaml") + `:3: tools[0]: unknown tool "web_serch" (builtin tools: current_time)`,
		filepath.Join(profs, "other", "profile.yaml") + `:2: llm.provider: unknown provider "skynet"`,
		filepath.Join(profs, "other", "profile.yaml") + `:3: llm.modle: unknown key`,
		filepath.Join(profs, "other", "profile.yaml") + `:4: llm.api_key: environment variable OTHER_KEY is not set`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
}

// TestEnvironmentOverridesAreDecodedLikeTheFile: a GATEWAY_* value goes through the same
// decoder, and its problem names the variable and the key; lists split at commas.
func TestEnvironmentOverridesAreDecodedLikeTheFile(t *testing.T) {
	path := writeConfig(t, "state_dir: STATE\nsessions:\n  idle_evict: 5m\n")
	env := map[string]string{
		"GATEWAY_SESSIONS_IDLE_EVICT":          "soon",
		"GATEWAY_STT_ECHO_TRANSCRIPT":          "true",
		"GATEWAY_CHANNELS_TELEGRAM_ALLOW_FROM": "1, 2",
	}
	cfg, err := loadConfig(path, func(k string) string { return env[k] })
	if err == nil {
		t.Fatal("want errors")
	}
	for _, want := range []string{
		`GATEWAY_SESSIONS_IDLE_EVICT: sessions.idle_evict: "soon" is not a duration`,
		"GATEWAY_STT_ECHO_TRANSCRIPT: stt.echo_transcript: this key moved: set GATEWAY_SESSIONS_ECHO_TRANSCRIPT instead",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("errors lack %q:\n%v", want, err)
		}
	}
	if got := strings.Join(cfg.Channels.Telegram.AllowFrom, ","); got != "1,2" {
		t.Errorf("allow_from = %q; want 1,2", got)
	}
}

// A value the environment set and validation refuses is reported with the variable that
// set it, not with a line of the file, which does not hold it.
func TestRefusedValueFromTheEnvironmentNamesItsVariable(t *testing.T) {
	path := writeConfig(t, "state_dir: STATE\nlog:\n  level: info\n")
	env := map[string]string{
		"GATEWAY_BINDINGS":  `[{"profile":"p","match":{"channel":"webb"}}]`,
		"GATEWAY_LOG_LEVEL": "loud",
	}
	_, err := loadChecked(path, func(k string) string { return env[k] })
	if err == nil {
		t.Fatal("want errors")
	}
	for _, want := range []string{"GATEWAY_BINDINGS: bindings[0].match.channel", "GATEWAY_LOG_LEVEL: log.level"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("errors lack %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), path+":") {
		t.Errorf("an error names a line of the file for a value the environment set:\n%v", err)
	}
}
