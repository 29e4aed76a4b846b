package gateway

import (
	"fmt"
	"strings"
	"time"

	"gateway/channels"
	"gateway/harness"
)

// migrate takes over, on the session of the chat's new id, the conversation and settings
// the chat had under its old id (msg.MigrateFrom): a Telegram group upgraded to a
// supergroup. It runs in the new chat's order, before any message that came after the
// platform's notice, and reports false when the move must be done again (the gateway is
// stopping, or the store failed): the notice then stays journaled and is taken again
// after the restart. Every step may be done twice: a move done finds nothing left to move.
//
// When the new chat already has a conversation of its own (its messages were taken before
// the notice), that one is kept, the old one stays under the old id, and the log says so:
// merging two conversations would give the model a history nobody had.
func (s *session) migrate(msg *channels.Message) bool {
	g := s.g
	from := SessionKey(msg.Channel, msg.MigrateFrom, "")
	if from == s.key {
		return true
	}
	// The old chat's session may still be answering (its answers reach the new id): it
	// finishes first, and is closed so that its history is not open while it moves.
	if !g.retire(from) {
		return false
	}
	// What the admin API left for the old chat's next turn is for the chat's next turn.
	g.mu.Lock()
	if held := g.heldNext[from]; len(held) > 0 {
		s.nextTurn = append(held, s.nextTurn...)
		delete(g.heldNext, from)
	}
	g.mu.Unlock()
	g.tellAdmin(msg)
	result := harness.LogKept
	if s.running == nil && len(s.pending) == 0 {
		// The next turn reads the history from the store again, moved or not.
		s.agent, s.agentRT, s.agentProfile = nil, nil, nil
		var err error
		if result, err = g.store.MoveLog(from, s.key); err != nil {
			g.log.Error("cannot move the chat's conversation to its new id; tried again after a restart",
				"from", from, "to", s.key, "err", err)
			return false
		}
	}
	switch result {
	case harness.LogMoved:
		g.log.Info("the chat's conversation moved to its new id", "from", from, "to", s.key)
	case harness.LogKept:
		g.log.Warn("the chat's new id already has a conversation of its own (messages came before the platform said the id changed): it is kept, and the old conversation stays under the old id",
			"from", from, "to", s.key)
	}
	if !g.moveSettings(from, s.key) {
		return false
	}
	// What still comes for the old id goes to the chat under its new one (movedTo): the
	// messages kept for its next turn stay journaled under the old id until that turn
	// answers them, and a restart before then reads them back for the old id. Written
	// before the notice leaves the journal: a crash before it has the move done again.
	if g.settings != nil {
		if err := g.settings.SetSetting(from, movedToSetting, msg.ChatID); err != nil {
			g.log.Error("cannot save the chat's new id under its old one; tried again after a restart", "from", from, "to", s.key, "err", err)
			return false
		}
	}
	// The bindings of the old id go on applying to the chat (session.profile).
	if g.settings != nil {
		if err := g.settings.SetSetting(s.key, formerChatSetting, msg.MigrateFrom); err != nil {
			g.log.Error("cannot save the chat's former id; tried again after a restart", "session", s.key, "err", err)
			return false
		}
	}
	s.formerChat = msg.MigrateFrom
	if g.settings != nil {
		if v, ok, err := g.settings.Setting(s.key, "voice"); err == nil && ok {
			s.ttsMode.Store(&v)
		}
	}
	return true
}

// formerChatSetting is the setting, under the chat's new session key, that holds its old
// chat id: the bindings naming that id still apply (session.profile).
const formerChatSetting = "former_chat"

// movedToSetting is the setting, under a chat's old session key, that holds its new chat
// id (see movedTo).
const movedToSetting = "moved_to"

// movedTo is the chat id a chat of channel now has when chat is an id it had before
// (migrate), else "". Chats with threads are not moved: a group has none.
func (g *Gateway) movedTo(channel, chat, thread string) string {
	if g.settings == nil || thread != "" {
		return ""
	}
	key := SessionKey(channel, chat, "")
	to, ok, err := g.settings.Setting(key, movedToSetting)
	if err != nil {
		g.log.Warn("cannot read whether a chat has a new id; its message stays with the id it names", "session", key, "err", err)
		return ""
	}
	if !ok {
		return ""
	}
	return to
}

// retireWait is how often retire looks again at a session that is still busy.
const retireWait = 50 * time.Millisecond

// retire waits until key's session, if one is open here, has nothing running or queued,
// and closes it: the next message for key would open a new one, which reads the store. It
// reports false when the gateway stopped meanwhile.
func (g *Gateway) retire(key string) bool {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		g.mu.Lock()
		s, ok := g.sessions[key]
		if ok && s.idle {
			g.dropSessionLocked(s)
		}
		busy := ok && !s.closed
		g.mu.Unlock()
		if !busy {
			return true
		}
		t.Reset(retireWait)
		select {
		case <-g.ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// moveSettings moves the chat's settings from the old key to the new one. A setting the
// new key has already (set in the new chat before the move) is kept. It reports false when
// the state could not be read or written.
func (g *Gateway) moveSettings(from, to string) bool {
	if g.settings == nil {
		return true
	}
	// The chat's own settings under its session key. (Answers' placements, the other
	// settings kept there, belong to messages in flight, not to the chat.)
	for _, name := range []string{"voice"} {
		v, ok, err := g.settings.Setting(from, name)
		if err == nil && ok {
			var has bool
			if _, has, err = g.settings.Setting(to, name); err == nil && !has {
				err = g.settings.SetSetting(to, name, v)
			}
			if err == nil {
				// Written to the new key before the old one goes: a crash between them
				// leaves it under both, and the move done again removes the old one.
				err = g.settings.DeleteSetting(from, name)
			}
		}
		if err != nil {
			g.log.Error("cannot move the chat's settings to its new id; tried again after a restart",
				"from", from, "to", to, "setting", name, "err", err)
			return false
		}
	}
	return true
}

// tellAdmin says in the log, plainly, that a chat's id changed and which profile bindings
// name the old id: the config is the admin's, and is not rewritten.
func (g *Gateway) tellAdmin(msg *channels.Message) {
	rt, release := g.acquire()
	defer release()
	var stale []string
	for i, b := range rt.Profiles.Bindings() {
		if b.Match.Chat == msg.MigrateFrom && (b.Match.Channel == "" || b.Match.Channel == msg.Channel) {
			stale = append(stale, fmt.Sprintf("bindings[%d] (profile %s)", i, b.Profile))
		}
	}
	g.log.Warn(fmt.Sprintf("%s: the chat %s has a new id, %s (a Telegram group upgraded to a supergroup); its conversation and settings follow it",
		msg.Channel, msg.MigrateFrom, msg.ChatID), "channel", msg.Channel, "old_chat", msg.MigrateFrom, "new_chat", msg.ChatID)
	if len(stale) > 0 {
		g.log.Warn(fmt.Sprintf("%s: gateway.yaml names the old id %s in %s: they go on applying to the chat under its new id until a binding names %s; change them to it there",
			msg.Channel, msg.MigrateFrom, strings.Join(stale, ", "), msg.ChatID),
			"channel", msg.Channel, "old_chat", msg.MigrateFrom, "new_chat", msg.ChatID)
	}
}
