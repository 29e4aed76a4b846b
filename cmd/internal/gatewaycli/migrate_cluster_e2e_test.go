package gatewaycli

import (
	"slices"
	"testing"

	"gateway/channels/telegram/telegramtest"
)

// In cluster mode too, a Telegram group upgraded to a supergroup keeps its conversation:
// the history moves to the new chat's key in Postgres, whichever process holds the new
// chat's partition, and Telegram's notice coming again moves nothing more.
func TestClusterGroupUpgradedToSupergroupKeepsItsConversation(t *testing.T) {
	const group, super = -800, -100800
	r := newClusterRig(t, "polling")
	r.start(2)
	say := func(chat int64, text string) {
		t.Helper()
		r.tg.Send(telegramtest.Update{ChatID: chat, Mention: true, Text: text})
		waitFor(t, "the answer to "+text, func() bool {
			return slices.Contains(r.telegramAnswers(chat), "re: alice: "+text)
		}, r.logs())
	}
	say(group, "my colour is blue")
	r.tg.Migrate(group, super)
	r.tg.MigrateTo(group, super)
	r.tg.MigrateFrom(group, super)
	say(super, "what is my colour?")
	r.tg.MigrateTo(group, super)
	r.tg.MigrateFrom(group, super)
	say(super, "and my name?")
	var asked []string
	for _, req := range r.oai.Requests() {
		if lastUser(req) == "alice: and my name?" {
			for _, m := range req.Messages {
				asked = append(asked, m.Content)
			}
		}
	}
	want := []string{"alice: my colour is blue", "re: alice: my colour is blue", "alice: what is my colour?", "re: alice: what is my colour?", "alice: and my name?"}
	if len(asked) < len(want) || !slices.Equal(asked[len(asked)-len(want):], want) {
		t.Fatalf("in the supergroup the model was asked %q; want the group's conversation before it, once:\n%s", asked, r.logs())
	}
	for _, p := range r.procs {
		p.stop()
	}
}
