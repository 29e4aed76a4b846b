package discord

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/bwmarrin/discordgo"

	"gateway/channels"
)

// Application commands: the gateway's commands are registered as Discord slash commands
// (one optional "args" text option each). An INTERACTION_CREATE is answered at once with a
// deferred response ("thinking…"), so a slow command never misses Discord's 3-second
// window; the command then runs as the text "/name args" from that user, and its answer
// replaces the deferred response.

// interactionLife is how long Discord accepts edits of an interaction's response.
const interactionLife = 15 * time.Minute

type pendingInteraction struct {
	in   *discordgo.Interaction
	when time.Time
}

// interactions remembers deferred interactions by the message id the gateway answers.
type interactions struct {
	mu sync.Mutex
	m  map[string]pendingInteraction
}

func (p *interactions) put(id string, in *discordgo.Interaction) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]pendingInteraction{}
	}
	now := time.Now()
	for k, v := range p.m {
		if now.Sub(v.when) > interactionLife {
			delete(p.m, k)
		}
	}
	p.m[id] = pendingInteraction{in: in, when: now}
}

// take returns (and forgets) the interaction a message id stands for.
func (p *interactions) take(id string) *discordgo.Interaction {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.m[id]
	if !ok || time.Since(v.when) > interactionLife {
		return nil
	}
	delete(p.m, id)
	return v.in
}

// SetCommands registers cmds as the bot's global application commands (a bulk overwrite).
func (c *Channel) SetCommands(ctx context.Context, cmds []channels.Command) error {
	app := c.bot()
	if app == "" {
		return fmt.Errorf("discord: not connected yet")
	}
	list := make([]*discordgo.ApplicationCommand, 0, len(cmds))
	for _, cmd := range cmds {
		list = append(list, &discordgo.ApplicationCommand{Name: cmd.Name, Description: cmd.Summary(100), // Discord's limit
			Type:    discordgo.ChatApplicationCommand,
			Options: []*discordgo.ApplicationCommandOption{{Type: discordgo.ApplicationCommandOptionString, Name: "args", Description: "what follows the command"}}})
	}
	return c.call(ctx, "commands", "register application commands", func(ctx context.Context) error {
		_, err := c.s.ApplicationCommandBulkOverwrite(app, "", list, discordgo.WithContext(ctx))
		return err
	})
}

// interaction handles an INTERACTION_CREATE: an application command becomes a message.
func (c *Channel) interaction(ctx context.Context, raw json.RawMessage) {
	var in discordgo.Interaction
	if err := json.Unmarshal(raw, &in); err != nil {
		c.log.Warn("discord: an interaction could not be read", "err", err)
		return
	}
	if in.Type != discordgo.InteractionApplicationCommand {
		return
	}
	data := in.ApplicationCommandData()
	user := in.User
	if in.Member != nil && in.Member.User != nil {
		user = in.Member.User
	}
	if user == nil || c.dedup.Seen("i"+in.ID) {
		return
	}
	text := "/" + data.Name
	for _, o := range data.Options {
		if o.Name == "args" && o.Type == discordgo.ApplicationCommandOptionString {
			if v := strings.TrimSpace(o.StringValue()); v != "" {
				text += " " + v
			}
		}
	}
	msg := &channels.Message{ID: "i" + in.ID, Channel: Name, ChatID: in.ChannelID, UserID: user.ID, UserName: user.Username,
		ChatType: channels.ChatDM, Mentioned: true, Parts: []channels.Part{channels.TextPart(text)}, Time: time.Now()}
	if in.GuildID != "" {
		msg.ChatType = channels.ChatGroup
		if ci, ok := c.channelInfo(ctx, in.ChannelID); ok && ci.parent != "" {
			msg.ChatID, msg.ThreadID = ci.parent, in.ChannelID
		}
	}
	if c.cfg.Access.Check(msg) == channels.NotAllowed {
		// Only the stranger sees it: a server channel is not told who may not use the bot.
		c.respond(ctx, &in, channels.NotAllowedText(msg.UserID), discordgo.MessageFlagsEphemeral)
		return
	}
	// Within Discord's 3 seconds: "thinking…" until the answer replaces it.
	err := c.call(ctx, "interaction", "defer an interaction", func(ctx context.Context) error {
		return c.s.InteractionRespond(&in, &discordgo.InteractionResponse{Type: discordgo.InteractionResponseDeferredChannelMessageWithSource},
			discordgo.WithContext(ctx))
	})
	if err != nil {
		c.log.Warn("discord: cannot answer an interaction", "err", c.scrub.Wrap(err))
		return
	}
	c.pending.put(msg.ID, &in)
	c.share(msg.ID, &in)
	if err := c.sink.Deliver(ctx, msg); err != nil {
		c.pending.take(msg.ID)
		c.edit0(ctx, &in, "Sorry, I couldn't take this command right now. Please try again.")
	}
}

// respond answers an interaction at once with text.
func (c *Channel) respond(ctx context.Context, in *discordgo.Interaction, text string, flags discordgo.MessageFlags) {
	_ = c.call(ctx, "interaction", "answer an interaction", func(ctx context.Context) error {
		return c.s.InteractionRespond(in, &discordgo.InteractionResponse{Type: discordgo.InteractionResponseChannelMessageWithSource,
			Data: &discordgo.InteractionResponseData{Content: text, Flags: flags}}, discordgo.WithContext(ctx))
	})
}

// edit0 replaces a deferred interaction's response with text, at most maxLen characters.
func (c *Channel) edit0(ctx context.Context, in *discordgo.Interaction, text string) error {
	return c.call(ctx, "interaction", "answer an interaction", func(ctx context.Context) error {
		_, err := c.s.InteractionResponseEdit(in, &discordgo.WebhookEdit{Content: &text, AllowedMentions: noPings()}, discordgo.WithContext(ctx))
		return err
	})
}

// answerInteraction shows text as a deferred interaction's answer, split as any answer is:
// the response is one message like any other, so its first part replaces "thinking…" and
// the rest follow up on the interaction, in order.
func (c *Channel) answerInteraction(ctx context.Context, in *discordgo.Interaction, text string) error {
	parts := split(text)
	if len(parts) == 0 {
		parts = []string{"Done."}
	}
	if err := c.edit0(ctx, in, parts[0]); err != nil {
		return err
	}
	for _, p := range parts[1:] {
		err := c.call(ctx, "interaction", "follow up an interaction", func(ctx context.Context) error {
			_, err := c.s.FollowupMessageCreate(in, true, &discordgo.WebhookParams{Content: p, AllowedMentions: noPings()}, discordgo.WithContext(ctx))
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// interactionStream renders an answer into a deferred interaction's response: the final
// text replaces "thinking…", split into follow-ups past one message; parts go to the
// channel as usual.
type interactionStream struct {
	*stream
	in   *discordgo.Interaction
	text strings.Builder
	done bool
}

func (st *interactionStream) Send(ctx context.Context, f channels.Frame) error {
	switch f.Type {
	case channels.FrameStart:
		return nil
	case channels.FrameDelta:
		st.text.WriteString(f.Text)
		return nil
	case channels.FrameDone, channels.FrameError:
		if st.done {
			return fmt.Errorf("discord: the answer is already finished")
		}
		st.done = true
		text := f.Text
		if text == "" {
			text = st.text.String()
		}
		return st.c.answerInteraction(ctx, st.in, text)
	}
	return st.stream.Send(ctx, f)
}

// The deferred interactions are kept in State too, as one bounded list. In cluster mode the
// holder of the gateway connection receives the interactions but the answer may come from
// another process (the one running the chat's partition); a single process restarted
// after a crash answers again the commands its last run had deferred: either way the
// answer replaces "thinking…", rather than coming as a message beside a response left
// thinking until Discord gives up on it.
const (
	sharedMax    = 256 // deferred interactions kept in State, the newest
	sharedPrefix = "discord.interactions."
)

// storedInteraction is what editing a deferred response needs. The token is good for
// interactionLife only.
type storedInteraction struct {
	ID    string `json:"i"` // the message id the gateway answers ("i" + interaction id)
	App   string `json:"a"`
	Token string `json:"t"`
	At    int64  `json:"at"` // unix ms
}

// share stores a deferred interaction in State. Only the holder of the gateway
// connection (the process itself, without cluster mode) writes the list.
func (c *Channel) share(id string, in *discordgo.Interaction) {
	if c.state == nil {
		return
	}
	name := sharedPrefix + c.bot()
	list, err := c.sharedList(name)
	if err == nil {
		now := time.Now()
		keep := []storedInteraction{{ID: id, App: in.AppID, Token: in.Token, At: now.UnixMilli()}}
		for _, x := range list {
			if len(keep) < sharedMax && now.Sub(time.UnixMilli(x.At)) < interactionLife && x.ID != id {
				keep = append(keep, x)
			}
		}
		b, _ := json.Marshal(keep)
		err = c.state.SetCursor(name, string(b))
	}
	if err != nil {
		c.log.Warn("discord: cannot store an interaction for the other processes; only this one can answer it", "err", err)
	}
}

// shared finds a deferred interaction another process, or this one's last run, stored;
// nil when there is none.
func (c *Channel) shared(id string) *discordgo.Interaction {
	if c.state == nil || !strings.HasPrefix(id, "i") {
		return nil
	}
	list, err := c.sharedList(sharedPrefix + c.bot())
	if err != nil {
		c.log.Warn("discord: cannot read the interactions stored by the other processes", "err", err)
		return nil
	}
	for _, x := range list {
		if x.ID == id && time.Since(time.UnixMilli(x.At)) < interactionLife {
			return &discordgo.Interaction{ID: strings.TrimPrefix(id, "i"), AppID: x.App, Token: x.Token}
		}
	}
	return nil
}

func (c *Channel) sharedList(name string) ([]storedInteraction, error) {
	v, ok, err := c.state.Cursor(name)
	if err != nil || !ok || v == "" {
		return nil, err
	}
	var list []storedInteraction
	if err := json.Unmarshal([]byte(v), &list); err != nil {
		return nil, nil // unreadable: start a new list
	}
	return list, nil
}
