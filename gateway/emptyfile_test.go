package gateway

import (
	"strings"
	"testing"

	"gateway/channels"
	"gateway/channels/slack"
	"gateway/channels/slack/slacktest"
	"gateway/internal/secret"
)

// An empty text file reaches the model said to be empty, not as its name's two markers
// with nothing between them, which read as if its text went missing; one of blank lines
// is said to hold no text.
func TestEmptyTextFileIsSaidToBeEmpty(t *testing.T) {
	srv := slacktest.New(t)
	ch, err := slack.New(slack.Config{Enabled: true, BotToken: secret.Secret(slacktest.BotToken), AppToken: secret.Secret(slacktest.AppToken),
		APIURL: srv.APIURL(), Access: voiceAccess}, slack.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	e := newVisionEnv(t, []channels.Channel{ch})
	srv.Send(slacktest.UserMessage{Channel: "D4242", ChannelType: "im", User: "4242", Text: "What is in these?", Files: []slacktest.UserFile{
		{Name: "e.txt", MIME: "text/plain", Data: []byte{}}, {Name: "blank.txt", MIME: "text/plain", Data: []byte(" \n\n\t\n")}}})
	got := lastUserOf(t, e.waitRequests(t, 1)[0]).Content
	for _, want := range []string{"[file e.txt: the file is empty]", "[file blank.txt: the file holds only blank lines and spaces, no text]", "What is in these?"} {
		if !strings.Contains(got, want) {
			t.Errorf("the model received %q; want %q in it", got, want)
		}
	}
	if strings.Contains(got, "[end of file") {
		t.Errorf("the model received %q; want no empty file between markers", got)
	}
}
