package web_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"gateway/channels"
	"gateway/channels/channeltest"
	"gateway/channels/web"
	"gateway/channels/web/webtest"
	"gateway/internal/secret"
)

const webToken = "correct horse battery staple ü" // not ASCII on purpose: the page encodes it

// tokenProtocols is what the page offers when it holds tok.
func tokenProtocols(tok string) []string {
	return []string{"gateway.v1", "gateway.token." + base64.RawURLEncoding.EncodeToString([]byte(tok))}
}

// dialHello opens a socket on chat and returns it with its first frame, or the error that
// ended it (a refused socket is closed with a status, which the error carries).
func dialHello(t *testing.T, base, chat string, opts *websocket.DialOptions) (*websocket.Conn, *http.Response, serverFrame, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/ws?chat_id="+chat, opts)
	if err != nil {
		return nil, resp, serverFrame{}, err
	}
	t.Cleanup(func() { ws.CloseNow() })
	ws.SetReadLimit(-1)
	_, data, err := ws.Read(ctx)
	if err != nil {
		return ws, resp, serverFrame{}, err
	}
	var f serverFrame
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatalf("first frame %q is not JSON: %v", data, err)
	}
	return ws, resp, f, nil
}

func TestTokenRequiredForSocketAndMedia(t *testing.T) {
	logs := &channeltest.LogBuffer{}
	ch := web.New(web.Config{Enabled: true, Token: secret.Secret(webToken)}, web.Options{Logger: logs.Logger(), MediaDir: t.TempDir()})
	base := webtest.Serve(t, ch)
	channeltest.Start(t, ch, channeltest.NewSink())

	refused := []struct {
		name string
		opts *websocket.DialOptions
	}{
		{"no token", nil},
		{"no token, page protocol", &websocket.DialOptions{Subprotocols: []string{"gateway.v1"}}},
		{"wrong token", &websocket.DialOptions{Subprotocols: tokenProtocols("correct horse battery")}},
		{"unreadable token", &websocket.DialOptions{Subprotocols: []string{"gateway.v1", "gateway.token.%%%"}}},
		{"wrong bearer", &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer nope"}}}},
	}
	for _, c := range refused {
		_, _, f, err := dialHello(t, base, "locked", c.opts)
		if err == nil {
			t.Errorf("%s: got %+v; want the socket refused", c.name, f)
			continue
		}
		if st := websocket.CloseStatus(err); st != 4401 {
			t.Errorf("%s: socket ended with %v; want close status 4401 so the page asks for the token", c.name, err)
		}
	}

	ws, resp, hello, err := dialHello(t, base, "locked", &websocket.DialOptions{Subprotocols: tokenProtocols(webToken)})
	if err != nil || hello.Type != "hello" {
		t.Fatalf("with the right token: %+v %v; want hello", hello, err)
	}
	if p := ws.Subprotocol(); p != "gateway.v1" {
		t.Errorf("selected subprotocol %q; want gateway.v1 (never the token)", p)
	}
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "gateway_media" {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || strings.Contains(cookie.Value, webToken) {
		t.Fatalf("media cookie %+v; want an HttpOnly cookie that is not the token", cookie)
	}
	if _, _, f, err := dialHello(t, base, "locked", &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + webToken}}}); err != nil || f.Type != "hello" {
		t.Errorf("with the right bearer token: %+v %v; want hello", f, err)
	}

	// Media sent to the chat loads only with the cookie (or the token).
	st, err := ch.Open(context.Background(), channels.Target{Channel: "web", ChatID: "locked"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(context.Background(), channels.Frame{Type: channels.FrameParts, Parts: []channels.Part{{Type: channels.PartAudio, MIME: "audio/ogg", Data: []byte("OggS voice")}}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, data, err := ws.Read(ctx)
	var parts serverFrame
	if err == nil {
		err = json.Unmarshal(data, &parts)
	}
	if err != nil || len(parts.Parts) != 1 || parts.Parts[0].URL == "" {
		t.Fatalf("parts frame %s (%v)", data, err)
	}
	get := func(h http.Header, c *http.Cookie) int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+parts.Parts[0].URL, nil)
		for k, v := range h {
			req.Header[k] = v
		}
		if c != nil {
			req.AddCookie(c)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get(nil, nil); code != http.StatusUnauthorized {
		t.Errorf("media without the token = %d; want 401", code)
	}
	if code := get(nil, &http.Cookie{Name: "gateway_media", Value: "forged"}); code != http.StatusUnauthorized {
		t.Errorf("media with a forged cookie = %d; want 401", code)
	}
	if code := get(nil, cookie); code != http.StatusOK {
		t.Errorf("media with the cookie = %d; want 200", code)
	}
	if code := get(http.Header{"Authorization": {"Bearer " + webToken}}, nil); code != http.StatusOK {
		t.Errorf("media with the token = %d; want 200", code)
	}

	// The page itself holds nothing secret: it is served, and asks for the token.
	resp2, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusOK {
		t.Errorf("page = %s; want 200", resp2.Status)
	}
	if out := logs.String(); strings.Contains(out, webToken) || strings.Contains(out, base64.RawURLEncoding.EncodeToString([]byte(webToken))) || strings.Contains(out, cookie.Value) {
		t.Errorf("the token reached the logs:\n%s", out)
	}
}

// Without a token the chat is open as before, whatever the client offers.
func TestNoTokenConfiguredNeedsNone(t *testing.T) {
	_, base, _ := started(t, web.Config{Enabled: true})
	for _, opts := range []*websocket.DialOptions{nil, {Subprotocols: tokenProtocols("left over from another gateway")}} {
		ws, resp, f, err := dialHello(t, base, "open", opts)
		if err != nil || f.Type != "hello" {
			t.Fatalf("%+v: %+v %v; want hello", opts, f, err)
		}
		if opts != nil && ws.Subprotocol() != "gateway.v1" {
			t.Errorf("selected subprotocol %q; want gateway.v1, or browsers drop the socket", ws.Subprotocol())
		}
		for _, c := range resp.Cookies() {
			t.Errorf("cookie %s set with no token configured", c.Name)
		}
	}
}

// An upgrade the WebSocket library refuses is logged with the library's error, which echoes
// request headers: the token in them, plain or as the page encodes it, is scrubbed.
func TestTokenScrubbedFromLoggedErrors(t *testing.T) {
	logs := &channeltest.LogBuffer{}
	ch := web.New(web.Config{Enabled: true, Token: secret.Secret(webToken)}, web.Options{Logger: logs.Logger(), MediaDir: t.TempDir()})
	base := webtest.Serve(t, ch)
	channeltest.Start(t, ch, channeltest.NewSink())
	encoded := base64.RawURLEncoding.EncodeToString([]byte(webToken))
	for _, version := range []string{webToken, "gateway.token." + encoded} {
		req, _ := http.NewRequest(http.MethodGet, base+"/ws?chat_id=c1", nil)
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Sec-WebSocket-Key", base64.StdEncoding.EncodeToString(make([]byte, 16)))
		req.Header.Set("Sec-WebSocket-Version", version) // echoed by the library's error
		req.Header.Set("Sec-WebSocket-Protocol", strings.Join(tokenProtocols(webToken), ", "))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("upgrade with version %q = %s; want 400", version, resp.Status)
		}
	}
	out := logs.String()
	if !strings.Contains(out, "websocket accept failed") {
		t.Fatalf("the refused upgrades were not logged: %q", out)
	}
	if strings.Contains(out, webToken) || strings.Contains(out, encoded) {
		t.Errorf("the token appears in the logs: %q", out)
	}
}
