package discord_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"gateway/channels"
	"gateway/channels/discord"
	"gateway/channels/discord/discordtest"
	"gateway/internal/fakeserver"
)

// longAnswer is n characters or so of numbered sentences in paragraphs, so that a reader
// can tell whether any of it went missing.
func longAnswer(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "Sentence %03d of the report says something worth reading. ", i)
		if i%6 == 5 {
			b.WriteString("\n\n")
		}
	}
	return strings.TrimSpace(b.String())
}

// An application command's long answer arrives whole, split like the same answer to a
// typed message: the first part replaces "thinking…", the rest follow up on the
// interaction. Until now it was cut at 2000 characters with "…" and the rest was lost.
func TestLongInteractionAnswerArrivesWhole(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		frames func(text string) []channels.Frame
		size   int
	}{
		{"hook command result", func(text string) []channels.Frame {
			return []channels.Frame{{Type: channels.FrameDone, Text: text}}
		}, 4500},
		{"streamed model answer", func(text string) []channels.Frame {
			var fs []channels.Frame
			for _, piece := range strings.SplitAfter(text, ". ") {
				fs = append(fs, channels.Frame{Type: channels.FrameDelta, Text: piece})
			}
			return append(fs, channels.Frame{Type: channels.FrameDone})
		}, 3500},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := discordtest.New(t)
			e := start(t, srv, discord.Config{Access: defaultAccess()})
			text := longAnswer(tc.size)

			// The same answer to a typed DM, as the reference for how it should split.
			srv.InjectDM("720", user, "/report")
			typed := e.sink.Next(t)
			if err := answer(t, e.ch, channels.TargetOf(typed), tc.frames(text)...); err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, m := range srv.PostedBy(srv.Bot().ID, "720") {
				want = append(want, m.Content)
			}
			if len(want) < 2 {
				t.Fatalf("the typed answer came in %d messages; the test needs a split", len(want))
			}

			id := srv.InjectCommand("721", user, "report", "", false)
			cmd := e.sink.Next(t)
			if err := answer(t, e.ch, channels.TargetOf(cmd), tc.frames(text)...); err != nil {
				t.Fatal(err)
			}
			r := srv.Interaction(id)
			if len(r.Edits) != 1 {
				t.Fatalf("the deferred response was edited %d times; want once", len(r.Edits))
			}
			got := append([]string{r.Edits[0]}, r.Followups...)
			for i, part := range got {
				if n := utf8.RuneCountInString(part); n > discordtest.MaxContent {
					t.Errorf("part %d has %d characters", i, n)
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("the command's answer came as %d parts of %v characters; want the typed answer's %d parts of %v",
					len(got), lens(got), len(want), lens(want))
			}
			if msgs := srv.PostedBy(srv.Bot().ID, "721"); len(msgs) != 0 {
				t.Fatalf("part of the answer was posted outside the interaction: %d messages", len(msgs))
			}
		})
	}
}

func lens(parts []string) []int {
	var n []int
	for _, p := range parts {
		n = append(n, utf8.RuneCountInString(p))
	}
	return n
}

// An interaction's answer that fails says which URL failed, with the interaction's token
// (good for posting to the chat for 15 minutes) hidden.
func TestFailedInteractionAnswerHidesItsToken(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	e := start(t, srv, discord.Config{Access: defaultAccess()})
	srv.InjectCommand("722", user, "report", "", false)
	cmd := e.sink.Next(t)
	srv.FailNext(5, fakeserver.Failure{RetryAfter: 20 * time.Millisecond, Method: "interactionEdit"})
	err := answer(t, e.ch, channels.TargetOf(cmd), channels.Frame{Type: channels.FrameDone, Text: "the report"})
	if err == nil {
		t.Fatal("the answer went through five 429s")
	}
	want := srv.URL + "/api/v9/webhooks/" + srv.Bot().ID + "/***/messages/@original"
	if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "itok-") {
		t.Fatalf("error %q; want it to name %s, without the token", err, want)
	}
}

// Someone not on allow_from who runs a command in a server channel is told so alone
// (an ephemeral reply), not in front of the channel; nothing reaches the gateway.
func TestStrangersCommandIsRefusedToThemAlone(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	e := start(t, srv, discord.Config{Access: defaultAccess()})
	id := srv.InjectCommand("900", "666", "status", "", true)
	waitFor(t, "the refusal", func() bool { return srv.Interaction(id).Type == 4 })
	r := srv.Interaction(id)
	if r.Text != channels.NotAllowedText("666") || r.Flags&64 == 0 {
		t.Errorf("the refusal was %q with flags %d; want the not-allowed text seen only by the stranger (flag 64)", r.Text, r.Flags)
	}
	e.sink.ExpectNone(t, 200*time.Millisecond)
}
