package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gateway/channels"
	"gateway/harness"
	"gateway/harness/openaitest"
	"gateway/hooks"
	"gateway/internal/media"
)

func apiPost(t *testing.T, url, token string, body any) (int, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var out map[string]any
	json.Unmarshal(data, &out)
	return resp.StatusCode, out
}

// lastPrompt is the last user message of the fake's last request.
func lastPrompt(f *harness.Fake) string {
	reqs := f.Requests()
	if len(reqs) == 0 {
		return ""
	}
	msgs := reqs[len(reqs)-1].Messages
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" {
			return msgs[i].Content
		}
	}
	return ""
}

func TestAPISendAndToken(t *testing.T) {
	e := newEnv(t)
	code, body := apiPost(t, e.url+"/api/v1/send", "", map[string]any{"channel": "mem", "chat_id": "s1", "text": "Reminder: stand up"})
	if code != http.StatusOK {
		t.Fatalf("send: %d %v", code, body)
	}
	if got := e.mem.finals("s1"); !slices.Equal(got, []string{"done:Reminder: stand up"}) {
		t.Fatalf("chat got %v", got)
	}
	if len(e.fake.Requests()) != 0 {
		t.Fatal("send reached the model")
	}
	if code, _ := apiPost(t, e.url+"/api/v1/send", "", map[string]any{"channel": "nope", "chat_id": "s1", "text": "x"}); code != http.StatusBadRequest {
		t.Fatalf("unknown channel: %d", code)
	}

	srv := httptest.NewServer(e.g.Handler(HTTPOptions{AdminToken: "s3cret", Reload: func() ([]string, error) { return nil, nil }}))
	defer srv.Close()
	for _, path := range []string{"/api/v1/send", "/api/v1/inject", "/api/v1/reload"} {
		if code, _ := apiPost(t, srv.URL+path, "", map[string]any{}); code != http.StatusUnauthorized {
			t.Errorf("%s without the token: %d, want 401", path, code)
		}
		if code, _ := apiPost(t, srv.URL+path, "wrong", map[string]any{}); code != http.StatusUnauthorized {
			t.Errorf("%s with a wrong token: %d, want 401", path, code)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/v1/status", nil)
	resp, _ := http.DefaultClient.Do(req)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("status without the token: %d", resp.StatusCode)
	}
	if code, body := apiPost(t, srv.URL+"/api/v1/send", "s3cret", map[string]any{"channel": "mem", "chat_id": "s2", "text": "ok"}); code != http.StatusOK {
		t.Fatalf("with the token: %d %v", code, body)
	}
	if code, body := apiPost(t, srv.URL+"/api/v1/reload", "s3cret", nil); code != http.StatusOK || body["status"] != "reloaded" {
		t.Fatalf("reload: %d %v", code, body)
	}
	req, _ = http.NewRequest(http.MethodGet, srv.URL+"/api/v1/status", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var st map[string]any
	json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if st["channels"] == nil || st["sessions"] == nil {
		t.Fatalf("status %v", st)
	}
}

// An endpoint the API does not have, or one asked with the wrong method, is answered in JSON
// like every other refusal, naming what to use; without the token only 401 is told.
func TestAPIAnswersUnknownEndpointsInJSON(t *testing.T) {
	e := newEnv(t)
	srv := httptest.NewServer(e.g.Handler(HTTPOptions{AdminToken: "s3cret", Reload: func() ([]string, error) { return nil, nil }}))
	defer srv.Close()
	call := func(method, path, token string) (int, string, string) {
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		var out struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal(data, &out); err != nil {
			t.Errorf("%s %s: the answer is not JSON: %d %q", method, path, resp.StatusCode, data)
		}
		return resp.StatusCode, out.Error, resp.Header.Get("Allow")
	}
	if code, msg, _ := call(http.MethodPost, "/api/v1/sendd", "s3cret"); code != http.StatusNotFound || !strings.Contains(msg, "POST /api/v1/send") {
		t.Errorf("a misspelt endpoint: %d %q; want 404 naming POST /api/v1/send", code, msg)
	}
	if code, msg, allow := call(http.MethodGet, "/api/v1/send", "s3cret"); code != http.StatusMethodNotAllowed || allow != http.MethodPost || !strings.Contains(msg, "use POST") {
		t.Errorf("GET /api/v1/send: %d %q (Allow %q); want 405 saying use POST", code, msg, allow)
	}
	if code, msg, _ := call(http.MethodPost, "/api/v1/status", "s3cret"); code != http.StatusMethodNotAllowed || !strings.Contains(msg, "use GET") {
		t.Errorf("POST /api/v1/status: %d %q; want 405 saying use GET", code, msg)
	}
	if code, msg, _ := call(http.MethodPost, "/api/v1/sendd", ""); code != http.StatusUnauthorized || strings.Contains(msg, "/api/v1/send") {
		t.Errorf("a misspelt endpoint without the token: %d %q; want 401 only", code, msg)
	}
}

// Each deliver_as: followup with trigger starts a turn in an idle chat; next_turn waits for
// the next turn and goes before its prompt; steer joins the running turn.
func TestAPIInjectDeliverAs(t *testing.T) {
	e := newEnv(t)
	inject := func(body map[string]any) {
		t.Helper()
		body["channel"], body["chat_id"] = "mem", "i1"
		if code, out := apiPost(t, e.url+"/api/v1/inject", "", body); code != http.StatusAccepted {
			t.Fatalf("inject %v: %d %v", body, code, out)
		}
	}
	// followup + trigger: an idle session runs it now.
	inject(map[string]any{"text": "the build finished", "deliver_as": "followup", "trigger": true})
	e.mem.waitDone(t, 1)
	if p := lastPrompt(e.fake); p != "the build finished" {
		t.Fatalf("followup prompt %q", p)
	}
	// next_turn without trigger: nothing runs until the user writes.
	n := len(e.fake.Requests())
	inject(map[string]any{"text": "(the user's calendar: free at 3pm)", "deliver_as": "next_turn"})
	time.Sleep(100 * time.Millisecond)
	if len(e.fake.Requests()) != n {
		t.Fatal("next_turn started a turn")
	}
	e.mem.inject(t, "i1", "u1", "when am I free?")
	e.mem.waitDone(t, 1)
	if p := lastPrompt(e.fake); p != "(the user's calendar: free at 3pm)\n\nwhen am I free?" {
		t.Fatalf("next_turn prompt %q", p)
	}
	// steer: into the running turn, which makes another model call with it.
	started := make(chan struct{}, 1)
	e.fake.Push(harness.FakeReply{Text: "working", Delay: 300 * time.Millisecond})
	e.fake.SetFunc(func(req *harness.Request) harness.FakeReply { return harness.FakeReply{Text: "ok"} })
	bus := e.g.Runtime().Bus
	unsub := bus.On(hooks.NameTurnStart, "test", func(ctx context.Context, ev hooks.Event) (any, error) {
		select {
		case started <- struct{}{}:
		default:
		}
		return nil, nil
	})
	defer unsub()
	n = len(e.fake.Requests())
	e.mem.inject(t, "i1", "u2", "long task")
	<-started
	inject(map[string]any{"text": "also check the logs", "deliver_as": "steer"})
	e.mem.waitDone(t, 1)
	reqs := e.fake.Requests()[n:]
	if len(reqs) != 2 || lastPrompt(e.fake) != "also check the logs" {
		t.Fatalf("steer: %d requests, last prompt %q", len(reqs), lastPrompt(e.fake))
	}
	if f := e.mem.finals("i1"); len(f) != 3 {
		t.Fatalf("answers %v", f)
	}
	if code, _ := apiPost(t, e.url+"/api/v1/inject", "", map[string]any{"channel": "mem", "chat_id": "i1", "text": "x", "deliver_as": "sideways"}); code != http.StatusBadRequest {
		t.Fatalf("bad deliver_as: %d", code)
	}
}

// A message injected for a chat's next turn outlives the eviction of the chat's idle
// session (sessions.idle_evict): the chat's next message carries it.
func TestNextTurnInjectOutlivesTheChatsEviction(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *Runtime, _ *Deps) { c.IdleEvict = 50 * time.Millisecond })
	body := map[string]any{"channel": "mem", "chat_id": "ev1", "text": "(the user's calendar: free at 3pm)", "deliver_as": "next_turn"}
	if code, out := apiPost(t, e.url+"/api/v1/inject", "", body); code != http.StatusAccepted {
		t.Fatalf("inject: %d %v", code, out)
	}
	waitUntil(t, "eviction of the idle chat", func() bool {
		e.g.mu.Lock()
		defer e.g.mu.Unlock()
		_, live := e.g.sessions["mem:ev1"]
		return !live
	})
	e.mem.inject(t, "ev1", "m1", "when am I free?")
	e.mem.waitDone(t, 1)
	if p := lastPrompt(e.fake); p != "(the user's calendar: free at 3pm)\n\nwhen am I free?" {
		t.Fatalf("after the eviction the next turn was asked %q; want the injected text before the message", p)
	}
}

// wait: delivered returns the request_id that a hook saw on before_provider_request and on
// after_provider_response, through the real OpenAI SDK.
func TestAPIInjectWaitDelivered(t *testing.T) {
	srv := openaitest.NewServer()
	t.Cleanup(srv.Close)
	srv.SetFunc(func(r openaitest.Request) openaitest.Reply { return openaitest.Reply{Text: "noted"} })
	var mu sync.Mutex
	seen := map[string][]string{}
	record := func(ctx context.Context, ev hooks.Event) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *hooks.BeforeProviderRequest:
			seen[e.EventName()] = append(seen[e.EventName()], e.RequestID)
		case *hooks.AfterProviderResponse:
			seen[e.EventName()] = append(seen[e.EventName()], e.RequestID)
		}
		return nil, nil
	}
	e := newEnv(t, withProvider(srv), func(c *Config, rt *Runtime, d *Deps) {
		rt.Bus.On(hooks.NameBeforeProviderRequest, "test:req", record)
		rt.Bus.On(hooks.NameAfterProviderResponse, "test:resp", record)
	})
	code, out := apiPost(t, e.url+"/api/v1/inject", "", map[string]any{"channel": "mem", "chat_id": "w1",
		"text": "Background job 17 finished: 3 files changed.", "deliver_as": "followup", "trigger": true, "wait": "delivered"})
	if code != http.StatusOK || out["status"] != "delivered" {
		t.Fatalf("inject: %d %v", code, out)
	}
	id, _ := out["request_id"].(string)
	mu.Lock()
	defer mu.Unlock()
	if id == "" || !slices.Contains(seen[hooks.NameBeforeProviderRequest], id) || !slices.Contains(seen[hooks.NameAfterProviderResponse], id) {
		t.Fatalf("request_id %q; hooks saw %v", id, seen)
	}
	reqs := srv.Requests()
	if len(reqs) == 0 || !strings.Contains(reqs[len(reqs)-1].Messages[len(reqs[len(reqs)-1].Messages)-1].Content, "Background job 17") {
		t.Fatalf("the model did not get the message: %+v", reqs)
	}
}

// wait: delivered waits for a request that carries this message, not for one whose history
// holds the same words from earlier: a next_turn message whose text the chat already had
// is delivered by the next turn, not by a request of the turn that was running.
func TestAPIInjectWaitDeliveredIgnoresTheSameWordsInHistory(t *testing.T) {
	var mu sync.Mutex
	var ids []string
	e := newEnv(t, func(c *Config, rt *Runtime, d *Deps) {
		rt.Bus.On(hooks.NameBeforeProviderRequest, "test:req", func(ctx context.Context, ev hooks.Event) (any, error) {
			mu.Lock()
			defer mu.Unlock()
			ids = append(ids, ev.(*hooks.BeforeProviderRequest).RequestID)
			return nil, nil
		})
	})
	requestIDs := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(ids)
	}
	e.fake.SetFunc(func(req *harness.Request) harness.FakeReply { return harness.FakeReply{Text: "ok"} })
	e.mem.inject(t, "d1", "u1", "deploy finished")
	e.mem.waitDone(t, 1)

	// A long turn runs; a next_turn message with the same words waits for the turn after it.
	started := make(chan struct{}, 1)
	unsub := e.g.Runtime().Bus.On(hooks.NameTurnStart, "test", func(ctx context.Context, ev hooks.Event) (any, error) {
		select {
		case started <- struct{}{}:
		default:
		}
		return nil, nil
	})
	defer unsub()
	e.fake.Push(harness.FakeReply{Text: "working", Delay: 300 * time.Millisecond})
	e.mem.inject(t, "d1", "u2", "long task")
	<-started
	type result struct {
		code int
		out  map[string]any
		err  error
	}
	waited := make(chan result, 1)
	go func() {
		b, _ := json.Marshal(map[string]any{"channel": "mem", "chat_id": "d1", "text": "deploy finished",
			"deliver_as": "next_turn", "wait": "delivered"})
		resp, err := http.Post(e.url+"/api/v1/inject", "application/json", bytes.NewReader(b))
		if err != nil {
			waited <- result{err: err}
			return
		}
		defer resp.Body.Close()
		var out map[string]any
		err = json.NewDecoder(resp.Body).Decode(&out)
		waited <- result{code: resp.StatusCode, out: out, err: err}
	}()
	// The running turn makes a second request (a steer) whose history holds "deploy finished".
	// The message is taken once its watch listens on the bus.
	for deadline := time.Now().Add(30 * time.Second); !slices.ContainsFunc(e.g.Runtime().Bus.Handlers(),
		func(h hooks.HandlerInfo) bool { return h.Source == "api:inject" }); {
		if time.Now().After(deadline) {
			t.Fatal("the next_turn message was not taken")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code, out := apiPost(t, e.url+"/api/v1/inject", "", map[string]any{"channel": "mem", "chat_id": "d1",
		"text": "also check the logs", "deliver_as": "steer"}); code != http.StatusAccepted {
		t.Fatalf("steer: %d %v", code, out)
	}
	e.mem.waitDone(t, 1)
	if n := len(requestIDs()); n != 3 {
		t.Fatalf("%d model requests before the next turn; want 3", n)
	}
	e.mem.inject(t, "d1", "u3", "anything else?")
	e.mem.waitDone(t, 1)
	r := <-waited
	if r.err != nil || r.code != http.StatusOK {
		t.Fatalf("inject: %d %v %v", r.code, r.out, r.err)
	}
	got := requestIDs()
	if id := r.out["request_id"]; len(got) != 4 || id != got[3] {
		t.Fatalf("delivered by request %v; the requests were %v, and only the last carried the message", id, got)
	}
	if p := lastPrompt(e.fake); p != "deploy finished\n\nanything else?" {
		t.Fatalf("next turn's prompt %q", p)
	}
}

// apiPostRaw sends body as it is, so a test can send what json.Marshal never would.
func apiPostRaw(t *testing.T, url string, body io.Reader) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Error string `json:"error"`
	}
	data, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("the answer is not JSON: %q", data)
	}
	return resp.StatusCode, out.Error
}

// A send that cannot be delivered as asked is refused up front with the reason, naming the
// part, and nothing reaches the chat: the caller (a cron job, a hook) learns it from the
// answer, not from the gateway's log.
func TestAPISendRefusesBadRequests(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	report := filepath.Join(dir, "report.txt")
	if err := os.WriteFile(report, []byte("all good"), 0o600); err != nil {
		t.Fatal(err)
	}
	send := func(parts ...map[string]any) string {
		b, _ := json.Marshal(map[string]any{"channel": "mem", "chat_id": "bad", "text": "hi", "parts": parts})
		return string(b)
	}
	for name, c := range map[string]struct {
		body   string
		status int
		want   []string
	}{
		"missing file":   {send(map[string]any{"type": "image", "path": "/nonexistent.png"}), 400, []string{"part 0", "image", "/nonexistent.png", "does not exist"}},
		"unknown type":   {send(map[string]any{"type": "text", "text": "x"}, map[string]any{"type": "video", "path": report}), 400, []string{"part 1", `"video"`, "text, audio, image or file"}},
		"a directory":    {send(map[string]any{"type": "file", "path": dir}), 400, []string{"part 0", dir, "not a regular file"}},
		"no path":        {send(map[string]any{"type": "file", "name": "x.pdf"}), 400, []string{"part 0", `"path"`}},
		"trailing data":  {`{"channel": "mem", "chat_id": "bad", "text": "hi"} and more`, 400, []string{"after the JSON object"}},
		"second object":  {`{"channel": "mem", "chat_id": "bad", "text": "hi"}{"text": "again"}`, 400, []string{"after the JSON object"}},
		"too large":      {`{"channel": "mem", "chat_id": "bad", "text": "` + strings.Repeat("a", maxAPIBody) + `"}`, 413, []string{"the body is larger than 1 MiB"}},
		"too large tail": {`{"channel": "mem", "chat_id": "bad", "text": "hi"}` + strings.Repeat(" ", maxAPIBody), 413, []string{"the body is larger than 1 MiB"}},
	} {
		t.Run(name, func(t *testing.T) {
			code, msg := apiPostRaw(t, e.url+"/api/v1/send", strings.NewReader(c.body))
			if code != c.status {
				t.Errorf("status %d (%q), want %d", code, msg, c.status)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not say %q", msg, w)
				}
			}
		})
	}
	if got := e.mem.frames("bad"); len(got) != 0 {
		t.Errorf("a refused send reached the chat: %+v", got)
	}
	// inject reads its body the same way.
	if code, msg := apiPostRaw(t, e.url+"/api/v1/inject", strings.NewReader(`{"channel": "mem", "chat_id": "bad", "text": "hi"} x`)); code != 400 || !strings.Contains(msg, "after the JSON object") {
		t.Errorf("inject with trailing data: %d %q", code, msg)
	}

	// What is fine still goes: a file part and trailing white space after the object.
	code, msg := apiPostRaw(t, e.url+"/api/v1/send", strings.NewReader(send(map[string]any{"type": "file", "path": report})+"\n\n"))
	if code != http.StatusOK {
		t.Fatalf("a good send: %d %q", code, msg)
	}
	fs := e.mem.frames("bad")
	if len(fs) != 2 || fs[0].Type != channels.FrameParts || len(fs[0].Parts) != 1 || fs[1].Text != "hi" {
		t.Fatalf("the chat got %+v", fs)
	}
	if b, err := channels.ReadPart(fs[0].Parts[0], 0); err != nil || string(b) != "all good" || fs[0].Parts[0].Name != "report.txt" {
		t.Errorf("the file part delivered: %+v (%q, %v)", fs[0].Parts[0], b, err)
	}
}

// send hands out files from the gateway's host, so it must not become a way to read the
// gateway's own state: under state_dir only the media store may be sent (the files chats
// shared, which hooks see by path), never the state database, the histories or an
// adapter's files, by whatever path or link they are named; nor pseudo-files such as
// /proc/self/environ, which holds the gateway's tokens. A file of the admin's elsewhere
// (a backup script's report) still goes.
func TestAPISendKeepsTheGatewaysOwnFiles(t *testing.T) {
	state := t.TempDir()
	store, err := media.OpenStore(filepath.Join(state, "media"), media.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvIn(t, filepath.Join(state, "sessions"), func(_ *Config, _ *Runtime, d *Deps) { d.Media, d.StateDir = store, state })
	write := func(path, content string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	db := write(filepath.Join(state, "state.db"), "the journal")
	history := write(filepath.Join(state, "sessions", "web_chat-1.jsonl"), `{"type":"session"}`)
	download := write(filepath.Join(state, "telegram", "media", "dl.ogg"), "a voice note in transit")
	shared := write(filepath.Join(state, "media", "2026-11-24", "k3j9-photo.jpg"), "a photo a user sent")
	outside := t.TempDir()
	report := write(filepath.Join(outside, "report.pdf"), "the nightly report")
	link := filepath.Join(outside, "innocent.pdf")
	if err := os.Symlink(db, link); err != nil {
		t.Fatal(err)
	}
	send := func(chat, path string) (int, string) {
		b, _ := json.Marshal(map[string]any{"channel": "mem", "chat_id": chat, "parts": []map[string]any{{"type": "file", "path": path}}})
		return apiPostRaw(t, e.url+"/api/v1/send", bytes.NewReader(b))
	}
	for _, path := range []string{db, history, download, link, filepath.Join(state, "media", "..", "state.db")} {
		code, msg := send("kept", path)
		if code != http.StatusForbidden || !strings.Contains(msg, "part 0") || !strings.Contains(msg, "state_dir/media") {
			t.Errorf("send %s: %d %q; want 403 naming the rule", path, code, msg)
		}
	}
	if code, msg := send("kept", "/proc/self/environ"); code != http.StatusBadRequest || !strings.Contains(msg, "not a regular file") {
		t.Errorf("send /proc/self/environ: %d %q; want 400", code, msg)
	}
	if got := e.mem.frames("kept"); len(got) != 0 {
		t.Errorf("the gateway's own files reached the chat: %+v", got)
	}
	for _, path := range []string{report, shared} {
		if code, msg := send("fine", path); code != http.StatusOK {
			t.Errorf("send %s: %d %q; want 200", path, code, msg)
		}
	}
	if got := e.mem.frames("fine"); len(got) != 4 {
		t.Errorf("the chat got %d frames, want the two files and two dones: %+v", len(got), got)
	}

	// state_dir is refused because it is state_dir, not because a media store sits in it:
	// with no media store (nothing under state_dir may go) the database is still kept.
	bare := newEnvIn(t, t.TempDir(), func(_ *Config, _ *Runtime, d *Deps) { d.StateDir = state })
	b, _ := json.Marshal(map[string]any{"channel": "mem", "chat_id": "bare", "parts": []map[string]any{{"type": "file", "path": db}}})
	if code, msg := apiPostRaw(t, bare.url+"/api/v1/send", bytes.NewReader(b)); code != http.StatusForbidden {
		t.Errorf("send %s with no media store: %d %q; want 403", db, code, msg)
	}
}

// getStatus is GET /api/v1/status, decoded.
func getStatus(t *testing.T, url string) map[string]any {
	t.Helper()
	resp, err := http.Get(url + "/api/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// sessionStatus is the entry of key in a status answer, or nil.
func sessionStatus(st map[string]any, key string) map[string]any {
	list, _ := st["sessions"].([]any)
	for _, s := range list {
		if m, _ := s.(map[string]any); m["key"] == key {
			return m
		}
	}
	return nil
}

// /api/v1/status tells, per chat, what /status in that chat tells: whether an answer is
// running and how many messages wait behind it. Empty lists are [] (a client iterates
// them without a nil check).
func TestAPIStatusShowsQueues(t *testing.T) {
	e := newEnv(t)
	release := make(chan struct{})
	e.fake.SetFunc(func(req *harness.Request) harness.FakeReply {
		if lastUser(*req) == "one" {
			<-release
		}
		return harness.FakeReply{Text: "answer to " + lastUser(*req)}
	})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	st := getStatus(t, e.url)
	for _, k := range []string{"sessions", "commands", "tools", "hooks"} {
		if l, ok := st[k].([]any); !ok || len(l) != 0 {
			t.Errorf("%s = %#v with nothing loaded; want []", k, st[k])
		}
	}

	e.mem.inject(t, "qs2", "1", "one")
	waitRequests(t, e.fake, 1)
	e.mem.inject(t, "qs2", "2", "two")
	e.mem.inject(t, "qs2", "3", "three")
	var s map[string]any
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		s = sessionStatus(getStatus(t, e.url), "mem:qs2")
		if s != nil && s["queued"] == 2.0 && s["mailbox"] == 0.0 || time.Now().After(deadline) {
			break
		}
	}
	if s == nil || s["running"] != true || s["queued"] != 2.0 || s["mailbox"] != 0.0 {
		t.Fatalf("status of mem:qs2 = %v; want running, 2 queued, mailbox 0", s)
	}
	e.mem.inject(t, "qs2", "4", "/status")
	e.mem.waitDone(t, 1)
	if f := e.mem.finals("qs2"); len(f) != 1 || !strings.Contains(f[0], "State: answering, 2 queued") {
		t.Fatalf("/status in the chat said %q", f)
	}

	close(release)
	e.mem.waitDone(t, 3)
	// The last done reaches the chat a moment before its turn has ended on the actor.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		s = sessionStatus(getStatus(t, e.url), "mem:qs2")
		if s != nil && s["running"] == false || time.Now().After(deadline) {
			break
		}
	}
	if s == nil || s["running"] != false || s["queued"] != 0.0 {
		t.Errorf("status of mem:qs2 after the answers = %v; want idle, nothing queued", s)
	}
}

// A chat busy taking a message (its receive hooks run on its actor) cannot tell its queue
// at once: status does not wait for it past a second, and says it does not know.
func TestAPIStatusDoesNotWaitForABusyChat(t *testing.T) {
	e := newEnv(t)
	entered, release := make(chan struct{}), make(chan struct{})
	e.bus.On(hooks.NameMessageReceive, "test:slow", func(ctx context.Context, ev hooks.Event) (any, error) {
		close(entered)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, nil
	})
	e.mem.inject(t, "busy", "1", "hello")
	<-entered
	start := time.Now()
	s := sessionStatus(getStatus(t, e.url), "mem:busy")
	took := time.Since(start)
	close(release)
	if took > 3*time.Second {
		t.Errorf("status took %v behind a busy chat", took)
	}
	if s == nil || s["running"] != nil || s["queued"] != nil {
		t.Errorf("status of the busy chat = %v; want running and queued null (unknown)", s)
	}
	e.mem.waitDone(t, 1)
}

// A next_turn with trigger while a turn runs and a message waits behind it: the waiting
// message's turn carries the text, and the inject's own turn, left with nothing to ask,
// does not run (it asked the model an empty message).
func TestNextTurnWithTriggerTakenByAWaitingTurnRunsNoEmptyTurn(t *testing.T) {
	e := newEnv(t)
	release := make(chan struct{})
	var calls atomic.Int32
	e.fake.SetFunc(func(req *harness.Request) harness.FakeReply {
		if calls.Add(1) == 1 {
			<-release
		}
		return harness.FakeReply{Text: "ok"}
	})
	queued := func() int {
		for _, s := range e.g.sessionStatus(context.Background()) {
			if s.Key == "mem:nt1" && s.Queued != nil {
				return *s.Queued
			}
		}
		return 0
	}
	e.mem.inject(t, "nt1", "u1", "long task")
	waitUntil(t, "the first turn asks the model", func() bool { return calls.Load() == 1 })
	e.mem.inject(t, "nt1", "u2", "and then this")
	waitUntil(t, "the second message waits", func() bool { return queued() == 1 })
	body := map[string]any{"channel": "mem", "chat_id": "nt1", "text": "(the user's calendar: free at 3pm)", "deliver_as": "next_turn", "trigger": true}
	if code, out := apiPost(t, e.url+"/api/v1/inject", "", body); code != http.StatusAccepted {
		t.Fatalf("inject: %d %v", code, out)
	}
	close(release)
	e.mem.waitDone(t, 2)
	if p := lastPrompt(e.fake); p != "(the user's calendar: free at 3pm)\n\nand then this" {
		t.Fatalf("the waiting message was asked %q; want the injected text before it", p)
	}
	e.mem.inject(t, "nt1", "u3", "thanks")
	e.mem.waitDone(t, 1)
	var prompts []string
	for _, r := range e.fake.Requests() {
		for i := len(r.Messages) - 1; i >= 0; i-- {
			if r.Messages[i].Role == "user" {
				prompts = append(prompts, r.Messages[i].Content)
				break
			}
		}
	}
	if want := []string{"long task", "(the user's calendar: free at 3pm)\n\nand then this", "thanks"}; !slices.Equal(prompts, want) {
		t.Fatalf("the model was asked %q; want %q", prompts, want)
	}
}
