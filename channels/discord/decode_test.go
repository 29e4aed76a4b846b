package discord

import "testing"

func TestDecodeMessageSurvivesWhatDiscordgoCannotRead(t *testing.T) {
	t.Parallel()
	// A component type discordgo does not know, nested in a container: only it goes.
	m, err := decodeMessage([]byte(`{"id":"1","channel_id":"2","author":{"id":"3"},"content":"",
		"components":[{"type":17,"components":[{"type":10,"content":"kept"},{"type":99}]}]}`))
	if err != nil || m.ID != "1" || m.Author == nil || componentText(m.Components) != "kept" {
		t.Fatalf("unknown component: %+v, %v", m, err)
	}
	// A field of a shape discordgo does not expect: what routes and answers it is kept.
	m, err = decodeMessage([]byte(`{"id":"4","channel_id":"5","author":{"id":"6"},"content":"hello","timestamp":"soon"}`))
	if err != nil || m.ID != "4" || m.ChannelID != "5" || m.Author.ID != "6" || m.Content != "hello" {
		t.Fatalf("odd field: %+v, %v", m, err)
	}
	if _, err := decodeMessage([]byte(`{"id":`)); err == nil {
		t.Fatal("broken JSON decoded")
	}
}
