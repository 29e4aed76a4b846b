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
		// Not "starting: connecting to slack, web", which also names slack: the gateway
		// serves, the web chat with it, with Slack down.
		return code == http.StatusServiceUnavailable && strings.Contains(body, "slack") && !strings.Contains(body, "starting")
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

// A second SIGTERM while the gateway drains (here waiting for a turn whose model takes a
// minute) ends the process at once, by the signal, as Ctrl-C pressed twice does; the
// message whose turn was cut is answered once after the next start.
func TestSecondSignalStopsAtOnce(t *testing.T) {
	oai := newSlowModel(t, 1)
	p := telegramPlatform(t)
	root, addr := newRoot(t, oai, p)
	g := startChild(t, root, addr)
	p.send("hello there")
	waitFor(t, "the model is asked", func() bool { return oai.calls() == 1 }, g.log)
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	waitFor(t, "the drain begins", func() bool { return strings.Contains(g.log.String(), "shutting down") }, g.log)
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.done:
	case <-time.After(time.Minute):
		t.Fatalf("the gateway did not stop within a minute of a second SIGTERM; log:\n%s", g.log)
	}
	if ws, ok := g.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Fatalf("the gateway ended with %v; want ended by the second SIGTERM, not by the drain; log:\n%s", g.cmd.ProcessState, g.log)
	}

	g = startChild(t, root, addr)
	waitFor(t, "answered after the restart", func() bool { return len(p.answer()) > 0 }, g.log)
	quiet()
	if got := p.answer(); len(got) != 1 || got[0] != "answer 2" {
		t.Fatalf("after the restart the chat shows %q; want the answer once", got)
	}
	g.stop()
}
