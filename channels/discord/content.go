package discord

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bwmarrin/discordgo"
)

// What a person addresses to the bot always reaches the model: text with Discord's markup
// turned into the words the Discord client shows, and what has no text (a sticker, a poll,
// an embed, a forwarded message) as a short description. Discord never redelivers, so a
// message dropped here is a message the user waits on forever.

// markupRE matches Discord's inline markup: user, role and channel mentions, custom emoji,
// timestamps and slash-command mentions. A trailing space is taken along so that a removed
// mention of the bot leaves no double space. It is compiled once and only read.
var markupRE = regexp.MustCompile(`<(@!?|@&|#)(\d{1,20})>( ?)|<a?:([\w~]{1,32}):\d{1,20}>|<t:(-?\d{1,13})(?::[tTdDfFR])?>|</([\w\- ]{1,100}):\d{1,20}>`)

// maxNameLookups bounds the REST look-ups of channel and role names one message may cause;
// past it, a mention reads as a generic "#channel" or "@role".
const maxNameLookups = 8

// lookupTimeout bounds one name look-up. Names are a nicety: one worker reads every
// Discord chat's messages in order, so a slow API must not hold them up with retries.
const lookupTimeout = 5 * time.Second

// lookup runs one REST look-up, once, within lookupTimeout. unseen says that Discord
// answered "no access" or "unknown": asking again would get the same answer, so the miss
// is worth remembering.
func (c *Channel) lookup(ctx context.Context, fn func(ctx context.Context) error) (unseen bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	err = fn(ctx)
	return isStatus(err, http.StatusForbidden) || isStatus(err, http.StatusNotFound), c.scrub.Wrap(err)
}

// textOpts says how to read one message's markup.
type textOpts struct {
	mentions []*discordgo.User
	guild    string   // where role and channel names are looked up; "" in DMs
	bot      string   // the bot's user id
	botRoles []string // roles that stand for the bot
	stripBot bool     // drop mentions of the bot (they only address it)
	lookups  *int     // name look-ups left for the message being read
}

// plainText rewrites Discord markup in s as the words a person sees in the client.
func (c *Channel) plainText(ctx context.Context, s string, o textOpts) string {
	if !strings.Contains(s, "<") {
		return strings.TrimSpace(s)
	}
	var b strings.Builder
	last := 0
	for _, m := range markupRE.FindAllStringSubmatchIndex(s, -1) {
		b.WriteString(s[last:m[0]])
		last = m[1]
		group := func(i int) string {
			if m[2*i] < 0 {
				return ""
			}
			return s[m[2*i]:m[2*i+1]]
		}
		switch {
		case m[2] >= 0: // <@id>, <@!id>, <@&id>, <#id>
			kind, id, space := group(1), group(2), group(3)
			word, drop := c.mentionWord(ctx, kind, id, o)
			if drop {
				continue
			}
			b.WriteString(word + space)
		case m[8] >= 0: // <:name:id>, <a:name:id>
			b.WriteString(":" + group(4) + ":")
		case m[10] >= 0: // <t:unix:style>
			sec, err := strconv.ParseInt(group(5), 10, 64)
			if err != nil {
				b.WriteString(s[m[0]:m[1]])
				continue
			}
			b.WriteString(time.Unix(sec, 0).UTC().Format("2006-01-02 15:04 UTC"))
		case m[12] >= 0: // </name sub:id>
			b.WriteString("/" + group(6))
		}
	}
	b.WriteString(s[last:])
	return strings.TrimSpace(b.String())
}

// mentionWord names one mention; drop is set for a mention of the bot that only addresses it.
func (c *Channel) mentionWord(ctx context.Context, kind, id string, o textOpts) (word string, drop bool) {
	switch kind {
	case "@", "@!":
		if id == o.bot && o.stripBot {
			return "", true
		}
		for _, u := range o.mentions {
			if u != nil && u.ID == id {
				return "@" + displayName(u), false
			}
		}
		return "@unknown-user", false
	case "@&":
		if o.stripBot && slices.Contains(o.botRoles, id) {
			return "", true
		}
		if name := c.roleName(ctx, o, id); name != "" {
			return "@" + name, false
		}
		return "@role", false
	default: // "#"
		if name := c.channelName(ctx, o, id); name != "" {
			return "#" + name, false
		}
		return "#channel", false
	}
}

func displayName(u *discordgo.User) string {
	if u.GlobalName != "" {
		return u.GlobalName
	}
	return u.Username
}

// spend takes one name look-up from the message's allowance.
func (o textOpts) spend() bool {
	if o.lookups == nil || *o.lookups <= 0 {
		return false
	}
	*o.lookups--
	return true
}

// channelName looks up a mentioned channel's name, or "" when the bot cannot see it.
// Failures are remembered too: a mention of a channel the bot cannot see is no reason
// to ask Discord again on every message.
func (c *Channel) channelName(ctx context.Context, o textOpts, id string) string {
	if name, ok := c.names.get("c/" + id); ok {
		return name
	}
	if !o.spend() {
		return ""
	}
	var ch *discordgo.Channel
	unseen, err := c.lookup(ctx, func(ctx context.Context) (err error) {
		ch, err = c.s.Channel(id, discordgo.WithContext(ctx))
		return err
	})
	if err != nil {
		c.log.Debug("discord: could not name a mentioned channel", "channel_id", id, "err", err)
		if unseen {
			c.names.put("c/"+id, "")
		}
		return ""
	}
	c.names.put("c/"+id, ch.Name)
	return ch.Name
}

// roleName looks up a mentioned role's name in the message's guild, or "" when unknown.
func (c *Channel) roleName(ctx context.Context, o textOpts, id string) string {
	if o.guild == "" {
		return ""
	}
	key := "r/" + o.guild + "/" + id
	if name, ok := c.names.get(key); ok {
		return name
	}
	if !o.spend() {
		return ""
	}
	var roles []*discordgo.Role
	unseen, err := c.lookup(ctx, func(ctx context.Context) (err error) {
		roles, err = c.s.GuildRoles(o.guild, discordgo.WithContext(ctx))
		return err
	})
	if err != nil {
		c.log.Debug("discord: could not name a mentioned role", "guild_id", o.guild, "role_id", id, "err", err)
		if unseen {
			c.names.put(key, "")
		}
		return ""
	}
	name := ""
	for _, r := range roles {
		if r == nil {
			continue
		}
		// One look-up names every role of the guild.
		c.names.put("r/"+o.guild+"/"+r.ID, r.Name)
		if r.ID == id {
			name = r.Name
		}
	}
	if name == "" {
		c.names.put(key, "")
	}
	return name
}

// notes describes in words what m carries besides its text and files. sender starts each
// note ("The user sent a sticker: …"); "" gives the neutral form ("Sticker: …") used for
// forwarded and quoted messages.
func (c *Channel) notes(ctx context.Context, m *discordgo.Message, o textOpts, sender string) []string {
	var out []string
	note := func(what, detail string) {
		switch {
		case sender != "" && detail != "":
			out = append(out, fmt.Sprintf("[%s %s: %s]", sender, what, detail))
		case sender != "":
			out = append(out, fmt.Sprintf("[%s %s]", sender, what))
		case detail != "":
			out = append(out, fmt.Sprintf("[%s: %s]", capital(strings.TrimPrefix(strings.TrimPrefix(what, "a "), "an ")), detail))
		default:
			out = append(out, fmt.Sprintf("[%s]", capital(strings.TrimPrefix(strings.TrimPrefix(what, "a "), "an "))))
		}
	}
	for _, s := range m.StickerItems {
		if s != nil {
			note("a sticker", strings.TrimSpace(s.Name))
		}
	}
	if p := m.Poll; p != nil {
		note("a poll", pollText(p))
	}
	text := strings.TrimSpace(m.Content)
	for _, e := range m.Embeds {
		if e == nil {
			continue
		}
		// Link previews repeat a link that is in the text already; only a message with
		// no text of its own needs them described. Rich embeds are written by bots and
		// carry text found nowhere else.
		if e.Type != "" && e.Type != discordgo.EmbedTypeRich && text != "" {
			continue
		}
		if d := c.embedText(ctx, e, o); d != "" {
			note("an embed", d)
		}
	}
	if t := componentText(m.Components); t != "" {
		out = append(out, c.plainText(ctx, t, o))
	}
	return out
}

func capital(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func pollText(p *discordgo.Poll) string {
	q := strings.TrimSpace(p.Question.Text)
	if q == "" {
		q = "(no question)"
	}
	var answers []string
	for _, a := range p.Answers {
		if a.Media == nil {
			continue
		}
		t := strings.TrimSpace(a.Media.Text)
		if e := a.Media.Emoji; e != nil && e.Name != "" {
			t = strings.TrimSpace(e.Name + " " + t)
		}
		if t != "" {
			answers = append(answers, t)
		}
	}
	s := strconv.Quote(q)
	if len(answers) > 0 {
		s += "; answers: " + strings.Join(answers, " / ")
	}
	if p.AllowMultiselect {
		s += " (more than one answer may be chosen)"
	}
	return s
}

// embedText gives an embed's words on one line: author, title, description, fields, footer, link.
func (c *Channel) embedText(ctx context.Context, e *discordgo.MessageEmbed, o textOpts) string {
	var bits []string
	add := func(s string) {
		if s = strings.TrimSpace(s); s != "" {
			bits = append(bits, s)
		}
	}
	if e.Author != nil {
		add(e.Author.Name)
	}
	add(e.Title)
	add(c.plainText(ctx, e.Description, o))
	for _, f := range e.Fields {
		if f != nil {
			add(strings.TrimSpace(f.Name + ": " + c.plainText(ctx, f.Value, o)))
		}
	}
	if e.Footer != nil {
		add(e.Footer.Text)
	}
	if len(bits) == 0 || e.Type != "" && e.Type != discordgo.EmbedTypeRich {
		add(e.URL)
	}
	return strings.Join(bits, " — ")
}

// componentText collects the text displays of a layout (components v2) message, whose
// content field is empty: its words live in the components.
func componentText(cs []discordgo.MessageComponent) string {
	var lines []string
	var walk func([]discordgo.MessageComponent, int)
	walk = func(cs []discordgo.MessageComponent, depth int) {
		if depth > 4 {
			return
		}
		for _, c := range cs {
			switch v := c.(type) {
			case *discordgo.TextDisplay:
				if t := strings.TrimSpace(v.Content); t != "" {
					lines = append(lines, t)
				}
			case *discordgo.Container:
				walk(v.Components, depth+1)
			case *discordgo.Section:
				walk(v.Components, depth+1)
			}
		}
	}
	walk(cs, 0)
	return strings.Join(lines, "\n")
}

// summary is a message's text and notes, without downloads: what a quoted message said.
func (c *Channel) summary(ctx context.Context, m *discordgo.Message, o textOpts) string {
	lines := []string{}
	if t := c.plainText(ctx, m.Content, o); t != "" {
		lines = append(lines, t)
	}
	lines = append(lines, c.notes(ctx, m, o, "")...)
	for _, a := range m.Attachments {
		if a != nil {
			lines = append(lines, "[Attachment: "+a.Filename+"]")
		}
	}
	for _, s := range m.MessageSnapshots {
		if s.Message != nil {
			if t := c.summary(ctx, s.Message, o); t != "" {
				lines = append(lines, "[Forwarded message] "+t)
			}
		}
	}
	return strings.Join(lines, "\n")
}

// forwardHeader introduces a forwarded message's content, quoted line by line so that the
// model can tell the forwarded words from the user's own.
func forwardHeader(body []string, files int) string {
	var b strings.Builder
	switch {
	case len(body) == 0 && files == 0:
		return "[The user forwarded a message with no text]"
	case len(body) == 0 && files == 1:
		return "[The user forwarded a message with an attachment]"
	case len(body) == 0:
		return fmt.Sprintf("[The user forwarded a message with %d attachments]", files)
	}
	b.WriteString("[The user forwarded a message]")
	for _, l := range body {
		for _, line := range strings.Split(l, "\n") {
			b.WriteString("\n> " + line)
		}
	}
	return b.String()
}
