package discordtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// AppCommand is an application command a bot registered.
type AppCommand struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Type        int    `json:"type,omitempty"`
	Options     []struct {
		Type int    `json:"type"`
		Name string `json:"name"`
	} `json:"options,omitempty"`
}

// InteractionReply is what a bot answered an interaction: the callback's type and content,
// then each edit of the original response, then the follow-up messages.
type InteractionReply struct {
	Type      int      // 4: message, 5: deferred
	Text      string   // the callback's content
	Flags     int      // the callback's message flags (64: only the user who ran the command sees it)
	Edits     []string // PATCH …/messages/@original
	Followups []string // POST /webhooks/{app}/{token}, in order
}

func (s *Server) putCommands(w http.ResponseWriter, r *http.Request, bot Bot, _ *Call) {
	var cmds []AppCommand
	if err := json.NewDecoder(r.Body).Decode(&cmds); err != nil || bot.ID != r.PathValue("app") {
		writeErr(w, http.StatusBadRequest, 50035, "Invalid Form Body")
		return
	}
	s.mu.Lock()
	if s.appCommands == nil {
		s.appCommands = map[string][]AppCommand{}
	}
	s.appCommands[bot.ID] = cmds
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, cmds)
}

func (s *Server) interactionCallback(w http.ResponseWriter, r *http.Request, _ Bot, _ *Call) {
	var body struct {
		Type int `json:"type"`
		Data struct {
			Content string `json:"content"`
			Flags   int    `json:"flags"`
		} `json:"data"`
	}
	id := r.PathValue("iid")
	s.mu.Lock()
	defer s.mu.Unlock()
	rep, ok := s.interactions[id]
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || !ok || rep.token != r.PathValue("token") {
		writeErr(w, http.StatusNotFound, 10062, "Unknown interaction")
		return
	}
	if rep.answered {
		writeErr(w, http.StatusBadRequest, 40060, "Interaction has already been acknowledged.")
		return
	}
	rep.answered = true
	rep.reply.Type, rep.reply.Text, rep.reply.Flags = body.Type, body.Data.Content, body.Data.Flags
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) editOriginal(w http.ResponseWriter, r *http.Request, _ Bot, _ *Call) {
	var body struct {
		Content *string `json:"content"`
	}
	if s.fail(w, r, "interactionEdit") {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var rep *interaction
	for _, x := range s.interactions {
		if x.token == r.PathValue("token") && x.app == r.PathValue("app") {
			rep = x
		}
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || rep == nil || !rep.answered || body.Content == nil {
		writeErr(w, http.StatusNotFound, 10015, "Unknown Webhook")
		return
	}
	if runeLen(*body.Content) > MaxContent {
		invalidForm(w, "content", "BASE_TYPE_MAX_LENGTH", fmt.Sprintf("Must be %d or fewer in length.", MaxContent))
		return
	}
	rep.reply.Edits = append(rep.reply.Edits, *body.Content)
	writeJSON(w, http.StatusOK, map[string]any{"id": s.newIDLocked(), "channel_id": rep.channel, "content": *body.Content})
}

// followup creates a follow-up message of an interaction answered before (Discord's
// "Create Followup Message"). The fake keeps it with the interaction, not in the channel.
func (s *Server) followup(w http.ResponseWriter, r *http.Request, _ Bot, _ *Call) {
	var body struct {
		Content string `json:"content"`
	}
	if s.fail(w, r, "interactionFollowup") {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var rep *interaction
	for _, x := range s.interactions {
		if x.token == r.PathValue("token") && x.app == r.PathValue("app") {
			rep = x
		}
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || rep == nil || !rep.answered {
		writeErr(w, http.StatusNotFound, 10015, "Unknown Webhook")
		return
	}
	if runeLen(body.Content) > MaxContent {
		invalidForm(w, "content", "BASE_TYPE_MAX_LENGTH", fmt.Sprintf("Must be %d or fewer in length.", MaxContent))
		return
	}
	if strings.TrimSpace(body.Content) == "" {
		writeErr(w, http.StatusBadRequest, 50006, "Cannot send an empty message")
		return
	}
	rep.reply.Followups = append(rep.reply.Followups, body.Content)
	writeJSON(w, http.StatusOK, map[string]any{"id": s.newIDLocked(), "channel_id": rep.channel, "content": body.Content})
}

type interaction struct {
	app, token, channel string
	answered            bool
	reply               InteractionReply
}

// AppCommands returns the application commands the bot registered.
func (s *Server) AppCommands(botID string) []AppCommand {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.appCommands[botID])
}

// Interaction returns what the bot answered the interaction so far.
func (s *Server) Interaction(id string) InteractionReply {
	s.mu.Lock()
	defer s.mu.Unlock()
	if x, ok := s.interactions[id]; ok {
		r := x.reply
		r.Edits = slices.Clone(r.Edits)
		r.Followups = slices.Clone(r.Followups)
		return r
	}
	return InteractionReply{}
}

// InjectCommand has user run the first bot's application command name with args (the
// "args" option; "" leaves it out) in a DM (guild false) or a guild channel, dispatching
// INTERACTION_CREATE. It returns the interaction id.
func (s *Server) InjectCommand(chatID, userID, name, args string, guild bool) string {
	s.mu.Lock()
	bot := s.bots[0]
	id, token := s.newIDLocked(), "itok-"+randHex(16)
	if s.channels[chatID] == nil {
		c := &channel{id: chatID, typ: 1, dmBot: bot.ID}
		if guild {
			c = &channel{id: chatID, typ: 0, guildID: s.guildID}
		}
		s.channels[chatID] = c
	}
	if s.interactions == nil {
		s.interactions = map[string]*interaction{}
	}
	s.interactions[id] = &interaction{app: bot.ID, token: token, channel: chatID}
	user := s.userLocked(userID)
	ev := map[string]any{"id": id, "application_id": bot.ID, "type": 2, "token": token, "version": 1, "channel_id": chatID,
		"data": map[string]any{"id": s.newIDLocked(), "name": name, "type": 1, "options": func() []map[string]any {
			if args == "" {
				return nil
			}
			return []map[string]any{{"name": "args", "type": 3, "value": args}}
		}()}}
	if guild {
		ev["guild_id"] = s.guildID
		ev["member"] = map[string]any{"user": user, "roles": []string{}}
	} else {
		ev["user"] = user
	}
	var targets []*session
	for _, ss := range s.sessions {
		if ss.bot.ID == bot.ID {
			targets = append(targets, ss)
		}
	}
	s.mu.Unlock()
	s.dispatchMu.Lock()
	defer s.dispatchMu.Unlock()
	for _, ss := range targets {
		ss.dispatch("INTERACTION_CREATE", ev)
	}
	return id
}
