package slacktest

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	slackgo "github.com/slack-go/slack"

	"gateway/internal/fakeserver"
)

func client(s *Server, token string) *slackgo.Client {
	return slackgo.New(token, slackgo.OptionAPIURL(s.APIURL()))
}

func TestWebAPIRules(t *testing.T) {
	s := New(t)
	ctx := context.Background()
	if _, err := client(s, "xoxb-wrong").AuthTestContext(ctx); err == nil || err.Error() != "invalid_auth" {
		t.Fatalf("wrong token: %v; want invalid_auth", err)
	}
	api := client(s, BotToken)
	s.AddChannel("C1")
	if _, _, err := api.PostMessageContext(ctx, "C1", slackgo.MsgOptionText(strings.Repeat("é", MaxTextLen+1), false)); err == nil || err.Error() != "msg_too_long" {
		t.Fatalf("over the limit: %v; want msg_too_long", err)
	}
	_, ts, err := api.PostMessageContext(ctx, "C1", slackgo.MsgOptionText(strings.Repeat("é", MaxTextLen), false))
	if err != nil {
		t.Fatalf("at the limit: %v", err)
	}
	if _, _, _, err := api.UpdateMessageContext(ctx, "C1", ts, slackgo.MsgOptionText("short", false)); err != nil {
		t.Fatal(err)
	}
	if p := s.Posted("C1"); len(p) != 1 || p[0].Text != "short" || p[0].Edits != 1 {
		t.Fatalf("posted %+v", p)
	}
	s.FailNext(1, fakeserver.Failure{RetryAfter: 1500 * time.Millisecond})
	_, _, err = api.PostMessageContext(ctx, "C1", slackgo.MsgOptionText("x", false))
	if rl, ok := errors.AsType[*slackgo.RateLimitedError](err); !ok || rl.RetryAfter != 2*time.Second {
		t.Fatalf("injected 429: %v; want Retry-After rounded up to 2s", err)
	}
	s.FailNext(1, fakeserver.Failure{})
	_, _, err = api.PostMessageContext(ctx, "C1", slackgo.MsgOptionText("x", false))
	if sc, ok := errors.AsType[slackgo.StatusCodeError](err); !ok || sc.Code != 500 {
		t.Fatalf("injected 5xx: %v", err)
	}
	s.FailNext(1, fakeserver.Failure{Method: "chat.update", Status: 200, Message: "cant_update_message"})
	if _, _, _, err := api.UpdateMessageContext(ctx, "C1", ts, slackgo.MsgOptionText("again", false)); err == nil || err.Error() != "cant_update_message" {
		t.Fatalf("injected ok:false: %v", err)
	}
}

func TestFileDownloadNeedsTheBotToken(t *testing.T) {
	s := New(t)
	ctx := context.Background()
	s.AudioClip("D1", "U1", []byte("OggS audio"), "audio/ogg")
	var url string
	s.mu.Lock()
	for _, f := range s.userFiles {
		url = s.URL + "/files/" + f.ID + "/" + f.Name
	}
	s.mu.Unlock()
	var got bytes.Buffer
	if err := client(s, "xoxb-wrong").GetFileContext(ctx, url, &got); err == nil {
		t.Fatalf("download with a wrong token succeeded: %q", got.String())
	}
	got.Reset()
	if err := client(s, BotToken).GetFileContext(ctx, url, &got); err != nil || got.String() != "OggS audio" {
		t.Fatalf("download: %q, %v", got.String(), err)
	}
}

func TestHeldDownloadWaitsForRelease(t *testing.T) {
	s := New(t)
	s.AudioClip("D1", "U1", []byte("OggS audio"), "audio/ogg")
	var url string
	s.mu.Lock()
	for _, f := range s.userFiles {
		url = s.URL + "/files/" + f.ID + "/" + f.Name
	}
	s.mu.Unlock()
	release := s.HoldDownloads(t)
	type result struct {
		data string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		var got bytes.Buffer
		err := client(s, BotToken).GetFileContext(context.Background(), url, &got)
		done <- result{got.String(), err}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for len(s.Calls("files.download")) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the download never arrived")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case r := <-done:
		t.Fatalf("a held download finished: %q, %v", r.data, r.err)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	if r := <-done; r.err != nil || r.data != "OggS audio" {
		t.Fatalf("after the release: %q, %v", r.data, r.err)
	}
}

func TestUploadFlowSharesIntoThread(t *testing.T) {
	s := New(t)
	s.AddChannel("C1")
	api := client(s, BotToken)
	data := []byte("OggS voice")
	_, err := api.UploadFileContext(context.Background(), slackgo.UploadFileParameters{
		Filename: "voice.ogg", FileSize: len(data), Reader: bytes.NewReader(data), Channel: "C1", ThreadTimestamp: "123.456",
	})
	if err != nil {
		t.Fatal(err)
	}
	p := s.Posted("C1")
	if len(p) != 1 || p[0].ThreadTS != "123.456" || len(p[0].Files) != 1 || p[0].Files[0].MIME != "audio/ogg" || !bytes.Equal(p[0].Files[0].Data, data) {
		t.Fatalf("posted %+v", p)
	}
}

func TestUsersInfo(t *testing.T) {
	s := New(t)
	ctx := context.Background()
	api := client(s, BotToken)
	s.SetUser("U1", "ally", "Alice Liddell")
	s.SetUser("U2", "", "")
	u, err := api.GetUserInfoContext(ctx, "U1")
	if err != nil || u.Profile.DisplayName != "ally" || u.Profile.RealName != "Alice Liddell" || u.RealName != "Alice Liddell" || u.Name != "u1" {
		t.Fatalf("U1: %+v, %v", u, err)
	}
	if u, err := api.GetUserInfoContext(ctx, "U2"); err != nil || u.Name != "u2" || u.Profile.DisplayName != "" {
		t.Fatalf("U2: %+v, %v", u, err)
	}
	if _, err := api.GetUserInfoContext(ctx, "U404"); err == nil || err.Error() != "user_not_found" {
		t.Fatalf("unknown user: %v; want user_not_found", err)
	}
	calls := s.Calls("users.info")
	if len(calls) != 3 || calls[2].Params.Get("user") != "U404" || calls[2].Error != "user_not_found" {
		t.Fatalf("calls %+v", calls)
	}
	s.SetUserInfoDelay(time.Minute)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := api.GetUserInfoContext(short, "U1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("slow users.info: %v; want the client's deadline", err)
	}
}

func TestDeletingAnUploadedFileTakesItsMessageAway(t *testing.T) {
	s := New(t)
	s.AddChannel("C1")
	ctx := context.Background()
	api := client(s, BotToken)
	if _, _, err := api.PostMessageContext(ctx, "C1", slackgo.MsgOptionText("the answer", false)); err != nil {
		t.Fatal(err)
	}
	f, err := api.UploadFileContext(ctx, slackgo.UploadFileParameters{
		Filename: "report.txt", FileSize: 3, Reader: strings.NewReader("abc"), Channel: "C1",
	})
	if err != nil {
		t.Fatal(err)
	}
	if p := s.Posted("C1"); len(p) != 2 || len(p[1].Files) != 1 || p[1].Files[0].ID != f.ID {
		t.Fatalf("after the upload the channel shows %+v; want the answer and the file %s", p, f.ID)
	}
	if err := api.DeleteFileContext(ctx, f.ID); err != nil {
		t.Fatal(err)
	}
	if p := s.Posted("C1"); len(p) != 1 || p[0].Text != "the answer" {
		t.Fatalf("after files.delete the channel shows %+v; want the answer alone", p)
	}
	if err := api.DeleteFileContext(ctx, f.ID); err == nil || err.Error() != "file_deleted" {
		t.Fatalf("deleting it again: %v; want file_deleted", err)
	}
	if err := api.DeleteFileContext(ctx, "F404"); err == nil || err.Error() != "file_not_found" {
		t.Fatalf("deleting an unknown file: %v; want file_not_found", err)
	}
}

// A channel the fake was never told of (no user wrote in it, no test added it), or one
// deleted since, is refused as Slack refuses one the bot is not in: HTTP 200 with ok false
// and channel_not_found, by every call that names it; nothing is stored. A user id is a
// channel (the app's DM) once the fake knows the user.
func TestWebAPIRefusesChannelsItDoesNotKnow(t *testing.T) {
	s := New(t)
	ctx := context.Background()
	api := client(s, BotToken)
	if _, _, err := api.PostMessageContext(ctx, "C404", slackgo.MsgOptionText("hello", false)); err == nil || err.Error() != "channel_not_found" {
		t.Errorf("post to an unknown channel: %v; want channel_not_found", err)
	}
	if _, _, err := api.PostMessageContext(ctx, "U404", slackgo.MsgOptionText("hello", false)); err == nil || err.Error() != "channel_not_found" {
		t.Errorf("post to an unknown user: %v; want channel_not_found", err)
	}
	if calls := s.Calls("chat.postMessage"); len(calls) != 2 || calls[0].Status != http.StatusOK || calls[0].Error != "channel_not_found" {
		t.Errorf("calls %+v; want HTTP 200 answers with channel_not_found", calls)
	}
	s.SetUser("U1", "ally", "")
	if _, _, err := api.PostMessageContext(ctx, "U1", slackgo.MsgOptionText("hello", false)); err != nil {
		t.Errorf("post to a known user's DM: %v", err)
	}
	s.AddChannel("C1")
	_, ts, err := api.PostMessageContext(ctx, "C1", slackgo.MsgOptionText("hello", false))
	if err != nil {
		t.Fatalf("post to an added channel: %v", err)
	}
	s.DeleteChannel("C1")
	if _, _, _, err := api.UpdateMessageContext(ctx, "C1", ts, slackgo.MsgOptionText("edited", false)); err == nil || err.Error() != "channel_not_found" {
		t.Errorf("edit in a deleted channel: %v; want channel_not_found", err)
	}
	if err := api.AddReactionContext(ctx, "eyes", slackgo.NewRefToMessage("C1", ts)); err == nil || err.Error() != "channel_not_found" {
		t.Errorf("reaction in a deleted channel: %v; want channel_not_found", err)
	}
	if _, err := api.UploadFileContext(ctx, slackgo.UploadFileParameters{Filename: "a.txt", FileSize: 1, Reader: strings.NewReader("a"), Channel: "C1"}); err == nil || !strings.Contains(err.Error(), "channel_not_found") {
		t.Errorf("upload into a deleted channel: %v; want channel_not_found", err)
	}
	if n := len(s.Posted("C1")) + len(s.Posted("C404")); n != 0 {
		t.Errorf("%d messages in unknown channels", n)
	}
}
