package slack

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	slackgo "github.com/slack-go/slack"

	"gateway/channels"
	"gateway/internal/markdown"
)

// Slack wants a slash command acknowledged within 3 seconds, or the user sees an error.
const commandDeliverTimeout = 2 * time.Second

// slashPrefix starts the message id of a slash command, which is not a Slack message.
const slashPrefix = "slash-"

func isSlashID(id string) bool { return strings.HasPrefix(id, slashPrefix) }

// slashInfo is what the adapter keeps of a delivered slash command to answer it.
type slashInfo struct {
	user string // who typed it: the reply is for their eyes
}

// commandName maps the name a slash command is registered under in the Slack app back to
// the gateway's command. Slack reserves /status for itself, so the manifest in
// docs/slack-app-manifest.yaml registers /agent-status.
func commandName(registered string) string {
	name := strings.ToLower(strings.TrimPrefix(strings.TrimSpace(registered), "/"))
	switch name {
	case "agent-status":
		return "status"
	case "agent-help":
		return "help"
	}
	return name
}

// CommandName is the slash command a Slack user types for the gateway's command name: the
// inverse of commandName.
func (c *Channel) CommandName(name string) string {
	switch name {
	case "status":
		return "agent-status"
	}
	return name
}

// HelpNote tells what /help's list cannot: Slack allows no slash command in a thread.
func (c *Channel) HelpNote() string {
	return "In a thread, where Slack allows no slash commands, write stop or new to me instead."
}

// onSlash turns a slash command into an inbound message with the text "/stop", "/new
// topic" and so on, through the same access policy as messages; the gateway parses the
// command from the text. It returns a text to answer the user with at once (privately),
// or "" when the command was taken and the gateway will answer it.
//
// A command in a DM acts on the DM's conversation. In a channel, where Slack does not
// allow commands inside threads, it acts on the user's latest conversation with the bot
// in that channel.
func (c *Channel) onSlash(ctx context.Context, cmd slackgo.SlashCommand) string {
	sink, _, ok := c.running()
	if !ok {
		return "I am not running right now. Please try again in a moment."
	}
	name := commandName(cmd.Command)
	if cmd.UserID == "" || cmd.ChannelID == "" || name == "" {
		c.log.Warn("slack: dropped a slash command without a user, channel or name", "command", cmd.Command)
		return ""
	}
	id := slashPrefix + cmd.TriggerID
	if cmd.TriggerID == "" {
		id = slashPrefix + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	release, dup, err := c.claims.claim(ctx, cmd.ChannelID+":"+id)
	if err != nil {
		return "Sorry, I could not take that command just now. Please try again."
	}
	if dup {
		return ""
	}
	taken := false
	defer func() { release(taken) }()

	text := "/" + name
	if args := strings.TrimSpace(plainText(cmd.Text, nil)); args != "" {
		text += " " + args
	}
	msg := &channels.Message{
		ID: id, Channel: Name, ChatID: cmd.ChannelID, UserID: cmd.UserID, ChatType: channels.ChatDM,
		Mentioned: true, // a command is addressed to the bot
		Time:      time.Now(), Parts: []channels.Part{channels.TextPart(text)},
	}
	if !strings.HasPrefix(cmd.ChannelID, "D") && cmd.ChannelName != "directmessage" {
		msg.ChatType = channels.ChatGroup
		msg.ThreadID, _ = c.lastThread.get(cmd.ChannelID + ":" + cmd.UserID)
	}
	if c.cfg.Access.Check(msg) == channels.NotAllowed {
		c.log.Info("slack: slash command from a user not on allow_from", "user", cmd.UserID, "chat", cmd.ChannelID)
		taken = true
		return channels.NotAllowedText(cmd.UserID)
	}
	c.commands.put(id, slashInfo{user: cmd.UserID})
	dctx, cancel := context.WithTimeout(ctx, commandDeliverTimeout)
	defer cancel()
	if err := sink.Deliver(dctx, msg); err != nil {
		c.log.Warn("slack: the gateway did not take a slash command", "command", "/"+name, "chat", cmd.ChannelID, "err", c.scrub.Wrap(err))
		return "Sorry, I could not take /" + name + " just now. Please try again in a moment."
	}
	taken = true
	return ""
}

// ephemeralPayload is a slash command's immediate answer, seen only by its user.
func ephemeralPayload(text string) map[string]string {
	return map[string]string{"response_type": "ephemeral", "text": markdown.EscapeMrkdwn(text)}
}

// serveCommands takes one slash command in events mode: the signature is checked as for
// events, and the answer is 200 (with a private reply when the command was not taken).
func (c *Channel) serveCommands(w http.ResponseWriter, r *http.Request) {
	body, ok := c.readSigned(w, r, "slash command")
	if !ok {
		return
	}
	runCtx, running := c.life.Enter() // Stop waits for the request
	if running {
		defer c.life.Leave()
	} else {
		runCtx = context.Background() // onSlash answers that the bot is not running
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if r.Header.Get("Content-Type") == "" {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	cmd, err := slackgo.SlashCommandParse(r)
	if err != nil {
		http.Error(w, "the body is not a slash command form", http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(runCtx, cancel)
	defer stop()
	reply := c.onSlash(ctx, cmd)
	if reply == "" {
		w.WriteHeader(http.StatusOK) // acknowledged; the gateway answers
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(ephemeralPayload(reply))
}

// ephemeral posts md to user alone in channel (chat.postEphemeral). Where Slack refuses
// that, the reply is posted as a normal message in thread instead, so that it is not lost.
func (c *Channel) ephemeral(ctx context.Context, channel, thread, user, md string) error {
	for _, ch := range markdown.Split(markdown.Mrkdwn(md), MaxTextLen, utf8.RuneCountInString) {
		if strings.TrimSpace(ch) == "" {
			continue
		}
		err := failed("chat.postEphemeral", channel, c.send.Do(ctx, channel, func(ctx context.Context) error {
			_, err := c.api.PostEphemeralContext(ctx, channel, user, slackgo.MsgOptionText(ch, false))
			return err
		}))
		if err == nil {
			continue
		}
		if ctx.Err() != nil {
			return err
		}
		c.log.Warn("slack: could not answer a command privately; answering in the channel", "chat", channel, "err", err)
		if _, err := c.post(ctx, &c.send, channel, thread, ch); err != nil {
			return err
		}
	}
	return nil
}
