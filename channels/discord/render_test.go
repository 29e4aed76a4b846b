package discord_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"gateway/channels"
	"gateway/channels/discord"
	"gateway/channels/discord/discordtest"
)

// While an answer streams, the preview of one that has opened a code block shows the code
// as code: Discord renders an unclosed fence as the backticks and the code as prose.
func TestStreamingPreviewClosesAnOpenCodeBlock(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	e := start(t, srv, discord.Config{Access: defaultAccess()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv.AddDM("780")
	st, err := e.ch.Open(ctx, channels.Target{ChatID: "780", ChatType: channels.ChatDM})
	if err != nil {
		t.Fatal(err)
	}
	// The first delta is shown at once (no edit came before it).
	for _, f := range []channels.Frame{{Type: channels.FrameStart}, {Type: channels.FrameDelta, Text: "Try this:\n```go\nfmt.Println(1)\n"}} {
		if err := st.Send(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	posted := srv.Posted("780")
	if len(posted) != 1 {
		t.Fatalf("posted %+v; want the preview", posted)
	}
	if want := "Try this:\n```go\nfmt.Println(1)\n```"; posted[0].Content != want {
		t.Errorf("the preview shows %q; want the code block closed: %q", posted[0].Content, want)
	}
	if err := st.Send(ctx, channels.Frame{Type: channels.FrameDone, Text: "Try this:\n```go\nfmt.Println(1)\n```\nDone."}); err != nil {
		t.Fatal(err)
	}
	if got := srv.Posted("780")[0].Content; got != "Try this:\n```go\nfmt.Println(1)\n```\nDone." {
		t.Errorf("the answer shows %q", got)
	}
}

// Discord has no tables: a Markdown table arrives as a code block with its columns lined up,
// not as rows of pipes and dashes.
func TestTableIsShownAsAlignedColumns(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	e := start(t, srv, discord.Config{Access: defaultAccess()})
	md := "Prices:\n\n| Fruit | Price |\n|-------|------:|\n| **Apple** | 1 |\n| Banana split | 12 |\n\nThat's all."
	srv.AddDM("781")
	if err := answer(t, e.ch, channels.Target{ChatID: "781", ChatType: channels.ChatDM}, channels.Frame{Type: channels.FrameDone, Text: md}); err != nil {
		t.Fatal(err)
	}
	posted := srv.Posted("781")
	if len(posted) != 1 {
		t.Fatalf("posted %+v; want one message", posted)
	}
	want := "Prices:\n\n```\nFruit        | Price\n-------------+------\nApple        | 1\nBanana split | 12\n```\n\nThat's all."
	if got := posted[0].Content; got != want {
		t.Errorf("the table shows as\n%s\nwant\n%s", got, want)
	}
	if strings.Contains(posted[0].Content, "|---") {
		t.Errorf("the table's delimiter row is shown: %q", posted[0].Content)
	}
}
