package slacktest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Command is a slash command a user types.
type Command struct {
	Channel string // channel id: D... for a DM, C... or G... for a channel
	User    string
	Command string // as registered in the app, with the slash: "/stop", "/agent-status"
	Text    string // what follows the command
}

// Reply is a private answer a user got to a slash command.
type Reply struct {
	Channel  string
	User     string
	Text     string
	ThreadTS string
	Via      string // "chat.postEphemeral", "ack" (the Socket Mode ack's payload), "response" (the HTTP answer), "response_url"
	Time     time.Time
}

// CommandResult is the HTTP answer the app gave to a slash command in events mode.
type CommandResult struct {
	TriggerID string
	Status    int // 0 when the request failed
	Body      string
}

type commandState struct {
	target  string
	replies []Reply
	results []CommandResult
}

// DeliverCommandsTo makes slash commands go to url as signed form POSTs, as Slack does in
// events mode (the command's Request URL). Without it, commands go over Socket Mode.
func (s *Server) DeliverCommandsTo(url string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.commands.target = url
}

// Replies lists the private answers users got in channel, oldest first.
func (s *Server) Replies(channel string) []Reply {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Reply
	for _, r := range s.commands.replies {
		if r.Channel == channel {
			out = append(out, r)
		}
	}
	return out
}

// CommandResults lists the HTTP answers to slash commands in events mode, oldest first.
func (s *Server) CommandResults() []CommandResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]CommandResult(nil), s.commands.results...)
}

// SlashCommand sends a slash command as Slack does: a slash_commands envelope over Socket
// Mode, or a signed form POST to the DeliverCommandsTo URL. It returns the trigger id.
func (s *Server) SlashCommand(c Command) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	trigger := s.nextID("trig.")
	s.known[c.Channel] = true // a command is typed in a conversation the app is in
	name := "directmessage"
	if !strings.HasPrefix(c.Channel, "D") {
		name = "general"
	}
	fields := map[string]string{
		"token": "legacy-verification-token", "team_id": TeamID, "team_domain": "fake",
		"channel_id": c.Channel, "channel_name": name, "user_id": c.User, "user_name": strings.ToLower(c.User),
		"command": c.Command, "text": c.Text, "api_app_id": AppID, "is_enterprise_install": "false",
		"response_url": s.URL + "/commands/response/" + url.PathEscape(c.Channel) + "/" + url.PathEscape(c.User),
		"trigger_id":   trigger,
	}
	if s.commands.target != "" {
		form := url.Values{}
		for k, v := range fields {
			form.Set(k, v)
		}
		s.postCommand(trigger, []byte(form.Encode()))
		return trigger
	}
	payload, _ := json.Marshal(fields)
	e := s.enqueue(trigger, envSlashCommands, payload, 0)
	e.channel, e.user = c.Channel, c.User
	s.poke()
	return trigger
}

// postCommand posts one slash command form; call with mu held. Slack does not retry
// commands: a failed one is an error the user sees.
func (s *Server) postCommand(trigger string, body []byte) {
	target := s.commands.target
	if s.ctx.Err() != nil {
		return
	}
	var form url.Values
	form, _ = url.ParseQuery(string(body))
	s.fs.Go(func(context.Context) {
		client := &http.Client{Timeout: 3 * time.Second} // Slack's own wait for a command
		h := Sign(SigningSecret, body, time.Now())
		h.Set("Content-Type", "application/x-www-form-urlencoded")
		req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, target, bytes.NewReader(body))
		if err != nil {
			return
		}
		req.Header = h
		res := CommandResult{TriggerID: trigger}
		if resp, err := client.Do(req); err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			res.Status, res.Body = resp.StatusCode, string(b)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.commands.results = append(s.commands.results, res)
		if res.Status == http.StatusOK && strings.TrimSpace(res.Body) != "" {
			s.replyFromPayload(form.Get("channel_id"), form.Get("user_id"), "response", json.RawMessage(res.Body))
		}
	})
}

// replyFromPayload records a command's immediate answer ({"text": ...}); call with mu held.
func (s *Server) replyFromPayload(channel, user, via string, payload json.RawMessage) {
	var p struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(payload, &p) == nil && p.Text != "" {
		s.commands.replies = append(s.commands.replies, Reply{Channel: channel, User: user, Text: p.Text, Via: via, Time: time.Now()})
	}
}

// postEphemeral answers chat.postEphemeral; call with mu held.
func (s *Server) postEphemeral(p url.Values) apiResult {
	ch, user, text := p.Get("channel"), p.Get("user"), p.Get("text")
	switch {
	case !s.knownLocked(ch):
		return errBody("channel_not_found")
	case user == "":
		return errBody("user_not_found")
	case strings.TrimSpace(text) == "" && p.Get("blocks") == "":
		return errBody("no_text")
	}
	s.commands.replies = append(s.commands.replies, Reply{Channel: ch, User: user, Text: text, ThreadTS: p.Get("thread_ts"), Via: "chat.postEphemeral", Time: time.Now()})
	return okBody("message_ts", s.nextTS())
}

// serveResponseURL takes a post to a command's response_url.
func (s *Server) serveResponseURL(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.replyFromPayload(r.PathValue("channel"), r.PathValue("user"), "response_url", b)
	s.mu.Unlock()
	io.WriteString(w, "ok")
}
