package gatewaycli

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gateway/harness/openaitest"
)

// A hook with api: true may run `gateway send` and `gateway reload`: with no config file
// where it runs, they reach the gateway that started it through the GATEWAY_API_URL and
// GATEWAY_API_TOKEN it was given, not the defaults (127.0.0.1:8080, no token).
func TestSendAndReloadFromAHookUseTheAPIItWasGiven(t *testing.T) {
	root := t.TempDir()
	hooksDir := filepath.Join(root, "hooks")
	// The hook's program keeps the environment it was given, for the test to run
	// `gateway` in it as the program would.
	writeHook(t, hooksDir, "backup", "commands: [{name: backup, description: run the backup}]\napi: true\ncommand: [./run.sh]\n",
		"cat >/dev/null\nenv > \"$GATEWAY_HOOK_DIR/env.txt\"\necho '{\"text\":\"backup started\"}'\n")
	g := startGateway(t, root, "admin: {token: \"hook-api-token-42\"}\n")
	u := g.user("chat-backup")
	if got := u.ask("/backup"); got[len(got)-1].Text != "backup started" {
		t.Fatalf("/backup answered %+v", got)
	}
	f, err := os.Open(filepath.Join(hooksDir, "backup", "env.txt"))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	f.Close()
	if env["GATEWAY_API_URL"] == "" {
		t.Fatalf("the hook was not given GATEWAY_API_URL: %v", env)
	}

	t.Chdir(t.TempDir()) // where a hook's program runs: no gateway.yaml
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, out := cli(t, ctx, env, "send", "--channel", "web", "--chat", "chat-backup", "Backup", "done")
	if code != 0 || !strings.Contains(out, "sent") {
		t.Fatalf("`gateway send` in the hook's environment = %d:\n%s", code, out)
	}
	if got := u.answer(); got[len(got)-1].Text != "Backup done" {
		t.Fatalf("the chat got %+v", got)
	}
	code, out = cli(t, ctx, env, "reload")
	if code != 0 || !strings.Contains(out, "reloaded") {
		t.Fatalf("`gateway reload` in the hook's environment = %d:\n%s", code, out)
	}
	g.waitLog("reloaded profiles and hooks", 1)

	// --config names the gateway to reach, whatever the environment says.
	code, out = cli(t, ctx, map[string]string{"GATEWAY_API_URL": "http://127.0.0.1:1/api/v1", "GATEWAY_API_TOKEN": "x"},
		"send", "--config", g.cfgPath, "--channel", "web", "--chat", "chat-backup", "from", "cron")
	if code != 0 || !strings.Contains(out, "sent") {
		t.Fatalf("`gateway send --config` with GATEWAY_API_URL set = %d:\n%s", code, out)
	}
	if got := u.answer(); got[len(got)-1].Text != "from cron" {
		t.Fatalf("the chat got %+v", got)
	}

	// The token travels as it was given: a wrong one is refused, and not shown.
	env["GATEWAY_API_TOKEN"] = "not-the-token"
	code, out = cli(t, ctx, env, "send", "--channel", "web", "--chat", "chat-backup", "hi")
	if code != 1 || !strings.Contains(out, "HTTP 401") || strings.Contains(out, "not-the-token") {
		t.Fatalf("`gateway send` with a wrong GATEWAY_API_TOKEN = %d:\n%s", code, out)
	}
}

// A refused reload logs no "hook loaded" for the hooks of the set it refused: the log reads
// as what happened. Once a reload is taken, its hooks are logged as loaded.
func TestRefusedReloadDoesNotLogItsHooksAsLoaded(t *testing.T) {
	root := t.TempDir()
	hooksDir := filepath.Join(root, "hooks")
	writeHook(t, hooksDir, "shout", receiveYAML, shout)
	g := startGateway(t, root, "")
	loaded := func() []string {
		var sources []string
		for _, r := range g.log.entries("hook loaded") {
			sources = append(sources, fmt.Sprint(r["source"]))
		}
		return sources
	}
	if got := loaded(); len(got) != 1 || !strings.HasSuffix(got[0], "/shout") {
		t.Fatalf("at startup the log says these hooks loaded: %q; want shout", got)
	}

	writeHook(t, hooksDir, "fresh", sendYAML, footer("(fresh)"))
	broken := writeHook(t, hooksDir, "typo", "events: [message:recieve]\ncommand: [./run.sh]\n", "cat >/dev/null\n")
	if code, out := cli(t, context.Background(), nil, "reload", "--config", g.cfgPath); code != 1 {
		t.Fatalf("`gateway reload` with a broken hook = %d:\n%s", code, out)
	}
	g.waitLog("reload failed; keeping the previous profiles and hooks", 1)
	if got := loaded(); len(got) != 1 {
		t.Fatalf("after a refused reload the log says these hooks loaded: %q; want only shout, from startup", got)
	}

	if err := os.RemoveAll(broken); err != nil {
		t.Fatal(err)
	}
	if code, out := cli(t, context.Background(), nil, "reload", "--config", g.cfgPath); code != 0 {
		t.Fatalf("`gateway reload` = %d:\n%s", code, out)
	}
	g.waitLog("reloaded profiles and hooks", 1)
	if got := loaded(); len(got) != 3 || !strings.HasSuffix(got[1], "/fresh") || !strings.HasSuffix(got[2], "/shout") {
		t.Fatalf("after the reload the log says these hooks loaded: %q; want shout, then fresh and shout", got)
	}
}

// With http.listen on port 0 (a free port, chosen when the gateway listens), a hook with
// api: true is given the port the gateway took, not 0: its calls reach the admin API.
func TestHookAPIURLNamesThePortChosenForListenZero(t *testing.T) {
	root := t.TempDir()
	hooksDir := filepath.Join(root, "hooks")
	writeHook(t, hooksDir, "where", "commands: [{name: where, description: where is the API}]\napi: true\ncommand: [./run.sh]\n",
		"cat >/dev/null\nenv > \"$GATEWAY_HOOK_DIR/env.txt\"\necho '{\"text\":\"noted\"}'\n")
	oai := openaitest.NewServer()
	t.Cleanup(oai.Close)
	g := &liveGateway{t: t, root: root, oai: oai, reload: make(chan struct{}, 1), log: &logBuffer{}}
	g.cfgPath = gatewayConfig(t, root, "127.0.0.1:0", oai.URL(), "admin: {token: \"zero-port-token\"}\n")
	g.runInBackground()
	url, _ := g.waitLog("listening", 1)[0]["url"].(string)
	g.addr = strings.TrimPrefix(url, "http://")
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if code, _ := g.get("/readyz"); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway at %s not ready within 15s; log:\n%s", g.addr, g.log)
		}
	}

	if got := g.user("chat-where").ask("/where"); got[len(got)-1].Text != "noted" {
		t.Fatalf("/where answered %+v", got)
	}
	data, err := os.ReadFile(filepath.Join(hooksDir, "where", "env.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var apiURL string
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "GATEWAY_API_URL="); ok {
			apiURL = v
		}
	}
	if want := "http://" + g.addr + "/api/v1"; apiURL != want {
		t.Fatalf("the hook was given GATEWAY_API_URL=%q, want %q", apiURL, want)
	}
	req, _ := http.NewRequest(http.MethodGet, apiURL+"/status", nil)
	req.Header.Set("Authorization", "Bearer zero-port-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("the hook's GATEWAY_API_URL does not reach the gateway: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s/status = %d", apiURL, resp.StatusCode)
	}
}
