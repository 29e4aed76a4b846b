package gatewaycli

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"gateway/harness/openaitest"
)

// TestRelativeHookFoldersRejectEndToEnd: the defaults (hooks under ./data/hooks, profiles
// under ./data/profiles) and the docs' `command: ["./run.sh"]`, run from a working directory
// that is not the hook folder. The rejecting hook must reject (issue 10: every call failed
// with "fork/exec hooks/x/run.sh: no such file or directory" and the message reached the
// model), a profile's hook must run, and check must see what run sees.
func TestRelativeHookFoldersRejectEndToEnd(t *testing.T) {
	root := t.TempDir()
	writeHook(t, filepath.Join(root, "data", "hooks"), "10-no-secrets", receiveYAML, `input=$(cat)
case "$input" in
*password*) echo '{"action":"reject","reason":"Do not send passwords here."}' ;;
esac
`)
	writeHook(t, filepath.Join(root, "data", "profiles", "alpha", "hooks"), "tag", receiveYAML, prefixWith("[alpha-hook]"))
	t.Chdir(root)

	oai := openaitest.NewServer()
	defer oai.Close()
	addr := freePort(t)
	cfg := fmt.Sprintf(`http: {listen: %q}
log: {format: json}
llm: {provider: openai, model: test-model, base_url: %q, max_retries: 1}
bindings:
  - profile: alpha
    match: {channel: web, chat: chat-a}
`, addr, oai.URL())
	writeFile(t, "gateway.yaml", cfg)

	code, out := cli(t, context.Background(), nil, "check")
	if code != 0 {
		t.Fatalf("check: exit %d:\n%s", code, out)
	}
	code, out = cli(t, context.Background(), nil, "hooks", "list")
	if code != 0 || !hasLine(out, "10-no-secrets", "message:receive") || !hasLine(out, "profile:alpha:hooks/tag", "alpha") {
		t.Fatalf("hooks list: exit %d:\n%s", code, out)
	}

	g := &liveGateway{t: t, root: root, addr: addr, oai: oai, reload: make(chan struct{}, 1), log: &logBuffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, g.reload, []string{"run"}, io.Discard, g.log, func(string) string { return "" }, nil)
	}()
	defer func() {
		cancel()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Errorf("gateway did not shut down within 30s")
		}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if code, _ := g.get("/readyz"); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready within 20s; log:\n%s", g.log)
		}
		time.Sleep(20 * time.Millisecond)
	}

	got := g.user("chat-b").ask("my password is hunter2")
	if len(got) != 1 || got[0].Type != "done" || got[0].Text != "Do not send passwords here." {
		t.Fatalf("answered with %+v; want the hook's reason; log:\n%s", got, g.log)
	}
	if n := len(oai.Requests()); n != 0 {
		t.Fatalf("the model got %d requests; the rejected message must never reach it", n)
	}
	oai.Push(openaitest.Reply{Chunks: []string{"Hi."}})
	if got := g.user("chat-a").ask("hello"); got[len(got)-1].Type != "done" {
		t.Fatalf("chat-a answer: %+v", got)
	}
	if asked := lastUser(g.lastRequest()); asked != "[alpha-hook] hello" {
		t.Fatalf("the model was asked %q; want the profile hook's prefix", asked)
	}
	if strings.Contains(g.log.String(), "hook failed") {
		t.Fatalf("a hook failed:\n%s", g.log)
	}
}

// TestHookReadsTheFileAUserSentUnderARelativeStateDir: with the default state_dir (./data,
// relative), the path of a file a user sent reaches a hook program, which runs in its own
// folder, as a path it can open. It used to be relative to the gateway's working directory
// ("data/media/web/..."), so the hook found no file there.
func TestHookReadsTheFileAUserSentUnderARelativeStateDir(t *testing.T) {
	root := t.TempDir()
	writeHook(t, filepath.Join(root, "data", "hooks"), "read-file", receiveYAML, `input=$(cat)
path=$(printf '%s' "$input" | sed -n 's/.*"type":"file"[^}]*"path":"\([^"]*\)".*/\1/p')
if content=$(cat "$path"); then
  printf '{"action":"reject","reason":"the file says: %s"}\n' "$content"
else
  printf '{"action":"reject","reason":"cannot read %s"}\n' "$path"
fi
`)
	t.Chdir(root)
	addr := freePort(t)
	writeFile(t, "gateway.yaml", fmt.Sprintf("http: {listen: %q}\nlog: {format: json}\n", addr))
	g := &liveGateway{t: t, root: root, addr: addr, log: &logBuffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, nil, []string{"run"}, io.Discard, g.log, func(string) string { return "" }, nil)
	}()
	defer func() {
		cancel()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Errorf("gateway did not shut down within 30s")
		}
	}()
	waitFor(t, "the gateway ready", func() bool { code, _ := g.get("/readyz"); return code == http.StatusOK }, g.log)

	u := g.user("chat-f")
	msg, _ := json.Marshal(map[string]any{"type": "message", "id": "f-1", "chat_id": "chat-f", "text": "my notes",
		"files": []map[string]string{{"mime": "text/plain", "name": "notes.txt", "data": base64.StdEncoding.EncodeToString([]byte("buy milk"))}}})
	if err := u.c.Write(context.Background(), websocket.MessageText, msg); err != nil {
		t.Fatal(err)
	}
	got := u.answer()
	if last := got[len(got)-1]; last.Text != "the file says: buy milk" {
		t.Fatalf("answered %+v; want the hook's reading of the file; log:\n%s", got, g.log)
	}
}

// TestHooksListSaysWhenThereAreNone: an empty table reads like a failure.
func TestHooksListSaysWhenThereAreNone(t *testing.T) {
	t.Chdir(t.TempDir())
	code, out := cli(t, context.Background(), nil, "hooks", "list")
	if code != 0 || !strings.Contains(out, "no hooks loaded") || !strings.Contains(out, "./data/hooks") {
		t.Fatalf("hooks list with no hooks: exit %d:\n%s", code, out)
	}
}

// TestReloadCommandSendsTheAdminToken: with admin.token set, the admin endpoint wants it
// (even from loopback) and `gateway reload` sends it.
func TestReloadCommandSendsTheAdminToken(t *testing.T) {
	g := startGateway(t, t.TempDir(), "admin: {token: \"reload-token-123\"}\n")
	if code, body := g.postReload(nil); code != http.StatusUnauthorized {
		t.Fatalf("POST /admin/reload without the token = %d %v; want 401", code, body)
	}
	if code, body := g.postReload(func(r *http.Request) { r.Header.Set("Authorization", "Bearer wrong") }); code != http.StatusUnauthorized {
		t.Fatalf("POST /admin/reload with a wrong token = %d %v; want 401", code, body)
	}
	code, out := cli(t, context.Background(), nil, "reload", "--config", g.cfgPath)
	if code != 0 || !strings.Contains(out, "reloaded") {
		t.Fatalf("gateway reload: exit %d:\n%s", code, out)
	}
	g.waitLog("reloaded profiles and hooks", 1)
}
