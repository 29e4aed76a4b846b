package gatewaycli

import (
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"gateway/channels/channeltest"

	"gateway/channels/slack/slacktest"
	"gateway/harness/openaitest"
)

// `gateway run` with Slack's api_url on a closed port keeps running: the web chat answers,
// /readyz says Slack is not connected, and the log says it is retried in the background.
func TestRunServesTheWebChatWhileSlackIsUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/api/"
	ln.Close()
	root := t.TempDir()
	slackYAML := "channels:\n  web: {enabled: true}\n  slack:\n    enabled: true\n" +
		"    bot_token: " + slacktest.BotToken + "\n    app_token: " + slacktest.AppToken + "\n    api_url: " + closed + "\n"
	g := launchGateway(t, root, slackYAML, 1, func(code int, body string) bool {
		// Not "starting": the gateway serves, with Slack down.
		return code == http.StatusServiceUnavailable && strings.Contains(body, "slack")
	})
	g.oai.SetFunc(func(openaitest.Request) openaitest.Reply { return openaitest.Reply{Text: "still here"} })
	fs := g.user("w1").ask("hello")
	if last := fs[len(fs)-1]; last.Type != "done" || !strings.Contains(last.Text, "still here") {
		t.Fatalf("the web chat got %v %q; want the answer", frameTypes(fs), last.Text)
	}
	g.waitLog("slack: cannot connect yet; retrying in the background", 1)
	g.waitLog("slack: still cannot connect; retrying in the background", 1)
	if code, body := g.get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, `"slack":false`) {
		t.Fatalf("/readyz = %d %s; want 503 with slack disconnected", code, body)
	}
}

// blackHole listens on 127.0.0.1 and takes connections without ever answering: a platform
// whose API hangs. Its URL is returned; it closes when the test ends.
func blackHole(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				break
			}
			conns = append(conns, c)
		}
		for _, c := range conns {
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return "http://" + ln.Addr().String()
}

// SIGTERM while a platform's first connection attempt still hangs is an ordinary shutdown:
// the gateway exits 0 and says it is shutting down, not that it "cannot start".
func TestSigtermWhileAChannelIsStillConnectingExitsCleanly(t *testing.T) {
	root, addr := t.TempDir(), freePort(t)
	oai := newSlowModel(t)
	writeChildConfig(t, root, addr, oai.URL(), "  discord:\n    enabled: true\n    token: \"not-checked-before-the-term\"\n"+
		"    api_url: "+blackHole(t)+"\n    allow_from: [\""+dcUser+"\"]\n")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	log := &channeltest.LogBuffer{}
	cmd := exec.Command(exe, "run", "--config", "gateway.yaml")
	cmd.Dir = root
	cmd.Env = []string{childEnv + "=1", "PATH=" + os.Getenv("PATH"), "HOME=" + root}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	// Serving, still starting: Discord's token check hangs, and readiness names it.
	waitFor(t, "the gateway serves while Discord's check hangs, its readiness naming discord", func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(body), "connecting to discord")
	}, log)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil || strings.Contains(log.String(), "cannot start") || !strings.Contains(log.String(), "shutting down") {
			t.Fatalf("SIGTERM during start: %v; want exit 0 and \"shutting down\", no \"cannot start\"; log:\n%s", err, log)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit within 30s of SIGTERM; log:\n%s", log)
	}
}
