package slack

import (
	"strings"
	"testing"

	"gateway/channels"
	"gateway/channels/slack/slacktest"
)

func TestSlackMarkupReachesTheModelAsPlainWords(t *testing.T) {
	s := slacktest.New(t)
	s.SetUser("U2003", "Carol", "Carol King")
	st := start(t, s, nil)

	s.DM("D50", user, "ask <@U2002|bob> and <@U2003> or <@U2999> in <#C9|general> or <#C8>: see "+
		"<https://example.com/a?b=1&amp;c=2|the docs>, <https://x.example> and <mailto:a@b.example|a@b.example> "+
		"<!here> <!subteam^S1|@oncall> <!date^1392734382^{date}|Feb 18th> &lt;b&gt; &amp; co")
	want := "ask @bob and @Carol or @U2999 in #general or #C8: see the docs (https://example.com/a?b=1&c=2), " +
		"https://x.example and a@b.example @here @oncall Feb 18th <b> & co"
	if m := st.sink.Next(t); m.Text() != want {
		t.Fatalf("delivered\n%q\nwant\n%q", m.Text(), want)
	}

	// A file share with Slack's own text about it: the words, and the file.
	s.Send(slacktest.UserMessage{Channel: "D50", User: user,
		Text:  "<@U1001|ann> uploaded a file: <https://files.example/F1/test.txt|test.txt>",
		Files: []slacktest.UserFile{{Name: "test.txt", MIME: "text/plain", Data: []byte("hello")}}})
	m := st.sink.Next(t)
	if m.Text() != "@ann uploaded a file: test.txt (https://files.example/F1/test.txt)" {
		t.Fatalf("file_share text %q", m.Text())
	}
	if len(m.Parts) != 2 || m.Parts[1].Type != channels.PartFile || m.Parts[1].Name != "test.txt" {
		t.Fatalf("parts %+v; want the text and the file", m.Parts)
	}
}

func TestNothingAPersonSendsIsSilent(t *testing.T) {
	s := slacktest.New(t)
	st := start(t, s, nil)

	// "/me waves" is a message of subtype me_message.
	s.Send(slacktest.UserMessage{Channel: "D51", User: user, Text: "waves", SubType: "me_message"})
	if m := st.sink.Next(t); m.Text() != "*waves*" {
		t.Fatalf("me_message delivered as %q; want the action", m.Text())
	}

	// A forwarded message: its text is in an attachment; the comment, if any, in text.
	share := map[string]any{
		"is_share": true, "is_msg_unfurl": true, "author_name": "Dana", "author_id": "U2004",
		"text": "the release is at <!date^1700000000^{time}|5pm>, ask <@U2002|bob>", "fallback": "[Nov 14] Dana: the release",
		"from_url": "https://fake.slack.com/archives/C1/p1700000000000100", "ts": "1700000000.000100",
		"channel_id": "C1", "mrkdwn_in": []string{"text"},
	}
	s.Send(slacktest.UserMessage{Channel: "D51", User: user, Attachments: []map[string]any{share}})
	m := st.sink.Next(t)
	if want := "[forwarded message from Dana]\nthe release is at 5pm, ask @bob"; m.Text() != want {
		t.Fatalf("forward delivered as %q; want %q", m.Text(), want)
	}
	s.Send(slacktest.UserMessage{Channel: "D51", User: user, Text: "is this right?", Attachments: []map[string]any{share}})
	m = st.sink.Next(t)
	if !strings.HasPrefix(m.Text(), "is this right?\n[forwarded message from Dana]\nthe release is at 5pm") {
		t.Fatalf("forward with a comment delivered as %q; want both", m.Text())
	}

	// A file Slack gives no download for: a word about it.
	s.Send(slacktest.UserMessage{Channel: "D51", User: user,
		Files: []slacktest.UserFile{{Name: "plan.gdoc", MIME: "application/vnd.google-apps.document", Mode: "external"}}})
	m = st.sink.Next(t)
	if !strings.Contains(m.Text(), "plan.gdoc") || len(m.Parts) != 1 {
		t.Fatalf("external file delivered as %+v; want a description", m.Parts)
	}

	// Nothing readable at all: still an answer, not silence.
	s.Send(slacktest.UserMessage{Channel: "D51", User: user})
	if m := st.sink.Next(t); m.Text() == "" {
		t.Fatalf("an empty message delivered with no text")
	}
}

func TestPlainText(t *testing.T) {
	for in, want := range map[string]string{
		"no markup":                     "no markup",
		"<https://a.example/>":          "https://a.example/",
		"<https://a.example|a.example>": "https://a.example",
		"<!channel> <!everyone>":        "@channel @everyone",
		"<!subteam^S2>":                 "@group",
		"a &lt;&amp;&gt; b":             "a <&> b",
		"<@W123|wendy>":                 "@wendy",
		"1 < 2 and 3 > 2":               "1 < 2 and 3 > 2",
		"<>":                            "<>",
	} {
		if got := plainText(in, nil); got != want {
			t.Errorf("plainText(%q) = %q; want %q", in, got, want)
		}
	}
}
