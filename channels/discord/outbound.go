package discord

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/bwmarrin/discordgo"

	"gateway/channels"
	"gateway/internal/markdown"
	"gateway/internal/pace"
)

const (
	editEvery     = time.Second     // at most one streaming edit per second
	typingEvery   = 8 * time.Second // Discord shows typing for ~10 s
	typingMaxLife = 15 * time.Minute
	maxUpload     = 25 << 20
)

// noPings lets answers mention users but never @everyone, @here or roles, whatever the
// model writes.
func noPings() *discordgo.MessageAllowedMentions {
	return &discordgo.MessageAllowedMentions{Parse: []discordgo.AllowedMentionType{discordgo.AllowedMentionTypeUsers}, RepliedUser: true}
}

// CheckTarget refuses a channel or thread id Discord cannot have (channels.TargetChecker):
// Discord's ids are snowflakes, unsigned 64-bit numbers written in decimal. Open does not
// ask it: the ids it is given come from Discord itself.
func (c *Channel) CheckTarget(t channels.Target) error {
	if !snowflake(t.ChatID) {
		return channels.BadTarget(fmt.Errorf("discord: %.64q is not a Discord channel id (a number of up to 20 digits, like 1234567890123456789)", t.ChatID))
	}
	if t.ThreadID != "" && !snowflake(t.ThreadID) {
		return channels.BadTarget(fmt.Errorf("discord: %.64q is not a Discord thread id (a number of up to 20 digits, like 1234567890123456789)", t.ThreadID))
	}
	return nil
}

// snowflake reports whether id is written as Discord writes its ids: decimal digits only,
// of a number that fits 64 bits.
func snowflake(id string) bool {
	_, err := strconv.ParseUint(id, 10, 64) // no sign, no underscores in base 10
	return err == nil
}

// Open starts one answer in target's chat, or in its thread.
func (c *Channel) Open(ctx context.Context, target channels.Target) (channels.Stream, error) {
	if target.ChatID == "" {
		return nil, errors.New("discord: the answer has no chat id")
	}
	if !c.life.Running() {
		return nil, errors.New("discord: the channel is not running")
	}
	st := &stream{c: c, dest: target.ChatID, replyTo: target.ReplyToID}
	if target.ThreadID != "" {
		st.dest = target.ThreadID // a thread is a channel of its own
	}
	if target.ReplyToID != "" {
		in := c.pending.take(target.ReplyToID)
		if in == nil {
			in = c.shared(target.ReplyToID) // received by the process holding the connection
		}
		if in != nil {
			return &interactionStream{stream: st, in: in}, nil // an application command's answer
		}
	}
	if target.ChatType == channels.ChatGroup && target.ReplyToID != "" {
		no := false
		st.ref = &discordgo.MessageReference{MessageID: target.ReplyToID, ChannelID: st.dest, FailIfNotExists: &no}
	}
	st.placed, st.placement = target.Placed, target.Resume
	for id := range strings.SplitSeq(target.Resume, ",") {
		if id != "" {
			st.msgs = append(st.msgs, posted{id: id, old: true})
		}
	}
	return st, nil
}

type posted struct {
	id   string
	text string // "" for one of an earlier attempt, not yet edited
	old  bool   // posted by an earlier attempt at this answer, cut by a crash (Target.Resume)
}

// stream renders one answer: typing while it runs, one message edited as text streams
// in (split at 2000 characters), voice and files as they come. Used from one goroutine.
type stream struct {
	c       *Channel
	dest    string
	ref     *discordgo.MessageReference // quote the user's message, on the first post only
	replyTo string                      // the user's message this answers; "" for none (an API send)
	// seed tells this stream's messages from those of another stream for the same user
	// message (a transcript notice, then the answer): see nonce.
	seed  string
	posts int // messages made by post and sendPart, numbered in their nonces

	buf        strings.Builder
	msgs       []posted
	lastRender time.Time
	finished   bool
	stopTyping context.CancelFunc

	placed    func(string) // told the ids of msgs when they change (channels.Target.Placed)
	placement string       // what it was last told
}

// report tells placed the answer's messages, when they changed since the last time.
func (st *stream) report() {
	ids := make([]string, len(st.msgs))
	for i, m := range st.msgs {
		ids[i] = m.id
	}
	if p := strings.Join(ids, ","); p != st.placement && st.placed != nil {
		st.placement = p
		st.placed(p)
	}
}

func (st *stream) Send(ctx context.Context, f channels.Frame) error {
	if st.finished {
		return errors.New("discord: the answer is already finished")
	}
	if st.seed == "" {
		// A stream that starts with its end is a notice, told apart from the chat's other
		// notices by its words; an answer starts with start (or text) and is the answer.
		st.seed = "answer"
		if f.Type == channels.FrameDone || f.Type == channels.FrameError {
			st.seed = "notice\x00" + f.Text
		}
	}
	switch f.Type {
	case channels.FrameStart:
		st.startTyping(ctx)
	case channels.FrameDelta:
		st.buf.WriteString(f.Text)
		// A preview skips its turn while a 429 holds the chat, and a failed one is not
		// final: the next turn, or done, renders the whole text again.
		if time.Since(st.lastRender) >= editEvery && !st.c.send.Held(st.dest) {
			if err := st.render(ctx, &st.c.optional, st.buf.String(), false); err != nil {
				if ctx.Err() != nil {
					return err
				}
				st.c.log.Warn("discord: streaming edit failed", "chat_id", st.dest, "err", err)
			}
		}
	case channels.FrameParts:
		if err := st.render(ctx, &st.c.send, st.buf.String(), false); err != nil {
			return err
		}
		for _, p := range f.Parts {
			if err := st.sendPart(ctx, p); err != nil {
				return err
			}
		}
	case channels.FrameDone:
		st.finish()
		text := f.Text
		if text == "" {
			text = st.buf.String()
		}
		return st.render(ctx, &st.c.send, text, true)
	case channels.FrameError:
		st.finish()
		text := f.Text
		if strings.TrimSpace(text) == "" {
			text = "Sorry, something went wrong."
		}
		return st.post(ctx, text)
	}
	return nil
}

func (st *stream) finish() {
	st.finished = true
	if st.stopTyping != nil {
		st.stopTyping()
	}
}

// startTyping shows typing now and refreshes it until the answer ends.
func (st *stream) startTyping(ctx context.Context) {
	if st.stopTyping != nil {
		return
	}
	// Entered before the first typing call, so that Stop waits for it as for the refreshes.
	run, ok := st.c.life.Enter()
	if !ok {
		return
	}
	tctx, cancel := context.WithTimeout(run, typingMaxLife)
	st.stopTyping = cancel
	if errors.Is(st.c.typing(ctx, st.dest), channels.ErrNoChat) {
		// No channel to show it in: refreshing would only be refused again.
		cancel()
		st.c.life.Leave()
		return
	}
	go func() {
		defer st.c.life.Leave()
		defer cancel()
		t := time.NewTicker(st.c.typingEvery)
		defer t.Stop()
		for {
			select {
			case <-tctx.Done():
				return
			case <-t.C:
				if errors.Is(st.c.typing(tctx, st.dest), channels.ErrNoChat) {
					return // the channel went away during the answer
				}
			}
		}
	}()
}

// typing shows typing in dest once; it skips its turn while a 429 holds the chat. A
// failure is logged here; it is returned for the refresh loop to tell a channel gone.
func (c *Channel) typing(ctx context.Context, dest string) error {
	if c.optional.Held(dest) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, optionalTimeout)
	defer cancel()
	err := c.optional.Do(ctx, dest, func(ctx context.Context) error {
		return calledURL(c.api, c.s.ChannelTyping(dest, discordgo.WithContext(ctx)))
	})
	if err != nil && ctx.Err() == nil {
		c.log.Debug("discord: typing failed", "chat_id", dest, "err", err)
	}
	return err
}

// render makes the posted messages show text: edits what changed, posts what is new,
// and (final) deletes leftovers when the text got shorter; through s, which is
// c.optional for a streaming preview.
func (st *stream) render(ctx context.Context, s *channels.Sender, text string, final bool) error {
	st.lastRender = time.Now()
	chunks := split(text)
	for i := 0; i < len(chunks); i++ {
		ch := chunks[i]
		if i < len(st.msgs) {
			if st.msgs[i].text == ch {
				continue
			}
			gone, err := st.c.edit(ctx, s, st.dest, st.msgs[i].id, ch)
			if st.msgs[i].old && gone {
				// A message of the answer the restart cut, deleted since: the answer goes
				// on without it, in new messages if need be.
				st.c.log.Info("discord: a message of the answer cut by the restart is gone; the answer goes on without it", "chat_id", st.dest, "message", st.msgs[i].id)
				st.msgs = slices.Delete(st.msgs, i, i+1)
				st.report()
				i--
				continue
			}
			if err != nil {
				return err
			}
			st.msgs[i].text = ch
			continue
		}
		ref := st.ref
		if i > 0 { // only the answer's first message quotes the user (an earlier attempt's may)
			ref = nil
		}
		m, err := st.c.postText(ctx, s, st.dest, ch, ref, st.nonce("text", i))
		if err != nil {
			return err
		}
		st.ref = nil
		st.msgs = append(st.msgs, posted{id: m.ID, text: ch})
		st.report()
		if strings.TrimSpace(m.Content) != strings.TrimSpace(ch) {
			// Discord returned the message this chunk's nonce made before a restart, with
			// the answer of then: it shows this one now.
			last := len(st.msgs) - 1
			st.msgs[last].text = m.Content
			if _, err := st.c.edit(ctx, s, st.dest, m.ID, ch); err != nil {
				return err
			}
			st.msgs[last].text = ch
		}
	}
	if final {
		for len(st.msgs) > len(chunks) {
			last := st.msgs[len(st.msgs)-1]
			if gone, err := st.c.remove(ctx, s, st.dest, last.id); err != nil && !(last.old && gone) {
				return err
			}
			st.msgs = st.msgs[:len(st.msgs)-1]
			st.report()
		}
	}
	return nil
}

// split renders text for Discord and cuts it into the messages that show it, each within
// Discord's limit.
func split(text string) []string {
	var chunks []string
	for _, ch := range markdown.Split(markdown.Discord(text), maxLen, utf8.RuneCountInString) {
		if strings.TrimSpace(ch) != "" {
			chunks = append(chunks, ch)
		}
	}
	return chunks
}

// post sends text as new messages after whatever the answer showed so far.
func (st *stream) post(ctx context.Context, text string) error {
	for _, ch := range split(text) {
		if _, err := st.c.postText(ctx, &st.c.send, st.dest, ch, st.takeRef(), st.nextPostNonce()); err != nil {
			return err
		}
	}
	return nil
}

// nonce is the nonce of one message the answer makes (what names it within the answer, and
// its number): the same for the same user message after a restart, so that Discord
// (enforce_nonce) returns the message made before the restart instead of posting the
// answer again when a journaled message is answered a second time. An answer to no message
// (an API send) has none.
func (st *stream) nonce(what string, n int) string {
	if st.replyTo == "" {
		return ""
	}
	h := sha256.Sum256([]byte(strings.Join([]string{st.dest, st.replyTo, st.seed, what, strconv.Itoa(n)}, "\x00")))
	return hex.EncodeToString(h[:])[:maxNonce]
}

// nextPostNonce numbers the messages of post and sendPart, in the order the answer makes them.
func (st *stream) nextPostNonce() string {
	st.posts++
	return st.nonce("post", st.posts)
}

func (st *stream) takeRef() *discordgo.MessageReference {
	r := st.ref
	st.ref = nil
	return r
}

func (st *stream) sendPart(ctx context.Context, p channels.Part) error {
	switch {
	case p.Type == channels.PartText:
		return st.post(ctx, p.Text)
	case p.Type == channels.PartAudio && (p.Voice || isOgg(p.MIME)):
		return st.c.sendVoice(ctx, st.dest, p, st.takeRef(), st.nextPostNonce())
	}
	return st.c.sendFile(ctx, st.dest, p, st.takeRef(), st.nextPostNonce())
}

func isOgg(m string) bool {
	m = strings.ToLower(m)
	return strings.HasPrefix(m, "audio/ogg") || strings.HasPrefix(m, "audio/opus")
}

// call runs fn through the send Sender (paced and held per chat when key is set, retried:
// a 429 waits retry_after, 5xx and network errors back off, anything else is final).
func (c *Channel) call(ctx context.Context, key, what string, fn func(ctx context.Context) error) error {
	return c.callWith(ctx, &c.send, key, what, fn)
}

// callWith is call through s, and names the failed operation in the error.
func (c *Channel) callWith(ctx context.Context, s *channels.Sender, key, what string, fn func(ctx context.Context) error) error {
	if !c.life.Running() {
		return errors.New("discord: the channel is not running")
	}
	err := s.Do(ctx, key, func(ctx context.Context) error {
		return calledURL(c.api, fn(ctx))
	})
	if err != nil {
		return fmt.Errorf("discord: %s in channel %s: %w", what, key, err)
	}
	return nil
}

// retryable is the Senders' Classify: Discord's answers marked for pace.Do, and a channel
// the bot cannot see marked channels.ErrNoChat (final).
func retryable(err error) error {
	if err == nil {
		return nil
	}
	if nc := noChannel(err); nc != nil {
		return nc
	}
	var ae *apiError
	if errors.As(err, &ae) {
		if ae.Code == http.StatusTooManyRequests {
			return pace.RetryAfter(err, ae.RetryAfter)
		}
		return pace.Transient(err)
	}
	var rl *discordgo.RateLimitError
	if errors.As(err, &rl) {
		return pace.RetryAfter(err, rl.RetryAfter)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return pace.Transient(err)
	}
	return err
}

// noChannel is err told in words when Discord refused the call because the bot cannot see
// the channel (10003 Unknown Channel, 50001 Missing Access), marked channels.ErrNoChat;
// nil for any other error. The admin reads it (the API's answer, the log), so it says what
// to check rather than Discord's JSON.
func noChannel(err error) error {
	var re *discordgo.RESTError
	if !errors.As(err, &re) || re.Message == nil {
		return nil
	}
	switch re.Message.Code {
	case discordgo.ErrCodeUnknownChannel:
		return channels.NoChat(fmt.Errorf("Discord knows no channel by this id that the bot can see: it was deleted, or the bot is not in its server (%d %s)", re.Message.Code, re.Message.Message))
	case discordgo.ErrCodeMissingAccess:
		return channels.NoChat(fmt.Errorf("the bot may not see this channel: give its role the View Channel permission there (%d %s)", re.Message.Code, re.Message.Message))
	}
	return nil
}

func isStatus(err error, code int) bool {
	return err != nil && restStatus(err) == code
}

// restStatus is the HTTP status of a failed REST call; 0 when it got no answer.
func restStatus(err error) int {
	var re *discordgo.RESTError
	if errors.As(err, &re) && re.Response != nil {
		return re.Response.StatusCode
	}
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.Code
	}
	return 0
}

// postText posts text and returns the message Discord made, or, for a nonce it saw in the
// last minutes, the message made with it then (whose text may differ).
func (c *Channel) postText(ctx context.Context, s *channels.Sender, dest, text string, ref *discordgo.MessageReference, nonce string) (*discordgo.Message, error) {
	var m *discordgo.Message
	err := c.callWith(ctx, s, dest, "send a message", func(ctx context.Context) (err error) {
		m, err = c.create(ctx, dest, &discordgo.MessageSend{Content: text, Reference: ref, AllowedMentions: noPings()}, nonce)
		return err
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// maxNonce is Discord's limit on a message nonce, in characters.
const maxNonce = 25

// noncedSend is a create with a nonce that Discord enforces, which discordgo's MessageSend
// cannot express.
type noncedSend struct {
	*discordgo.MessageSend
	Nonce        string `json:"nonce,omitempty"`
	EnforceNonce bool   `json:"enforce_nonce,omitempty"`
}

// create posts data in dest, as discordgo's ChannelMessageSendComplex does, with nonce
// enforced unless it is "". A retry of a create that reached Discord, its answer lost,
// is so answered with the message made, not a second one.
func (c *Channel) create(ctx context.Context, dest string, data *discordgo.MessageSend, nonce string) (*discordgo.Message, error) {
	body := noncedSend{MessageSend: data, Nonce: nonce, EnforceNonce: nonce != ""}
	endpoint := discordgo.EndpointChannelMessages(dest)
	var resp []byte
	var err error
	if len(data.Files) > 0 {
		ct, b, merr := discordgo.MultipartBodyWithJSON(body, data.Files)
		if merr != nil {
			return nil, merr
		}
		resp, err = c.s.RequestRaw(http.MethodPost, endpoint, ct, b, endpoint, 0, discordgo.WithContext(ctx))
	} else {
		resp, err = c.s.RequestWithBucketID(http.MethodPost, endpoint, body, endpoint, discordgo.WithContext(ctx))
	}
	if err != nil {
		return nil, err
	}
	var m discordgo.Message
	if err := json.Unmarshal(resp, &m); err != nil {
		return nil, fmt.Errorf("discord: the created message is not readable: %w", err)
	}
	return &m, nil
}

// edit makes message id show text; gone reports Discord answering that there is no such
// message (deleted), which the error, scrubbed, no longer tells.
func (c *Channel) edit(ctx context.Context, s *channels.Sender, dest, id, text string) (gone bool, err error) {
	err = c.callWith(ctx, s, dest, "edit a message", func(ctx context.Context) error {
		_, err := c.s.ChannelMessageEditComplex(&discordgo.MessageEdit{ID: id, Channel: dest, Content: &text, AllowedMentions: noPings()}, discordgo.WithContext(ctx))
		gone = isStatus(err, http.StatusNotFound)
		return err
	})
	return gone, err
}

// remove deletes message id; gone as for edit.
func (c *Channel) remove(ctx context.Context, s *channels.Sender, dest, id string) (gone bool, err error) {
	err = c.callWith(ctx, s, dest, "delete a message", func(ctx context.Context) error {
		err := c.s.ChannelMessageDelete(dest, id, discordgo.WithContext(ctx))
		gone = isStatus(err, http.StatusNotFound)
		return err
	})
	return gone, err
}

// partBytes returns a media part's bytes, at most Discord's upload limit.
func partBytes(p channels.Part) ([]byte, error) {
	b, err := channels.ReadPart(p, maxUpload)
	if err != nil {
		return nil, fmt.Errorf("discord: %w", err)
	}
	return b, nil
}

func (c *Channel) sendFile(ctx context.Context, dest string, p channels.Part, ref *discordgo.MessageReference, nonce string) error {
	data, err := partBytes(p)
	if err != nil {
		return err
	}
	name := p.Name
	if name == "" && p.Path != "" {
		name = filepath.Base(p.Path)
	}
	if name == "" {
		name = "file" + extFor(p.MIME)
	}
	return c.call(ctx, dest, "send a file", func(ctx context.Context) error {
		_, err := c.create(ctx, dest, &discordgo.MessageSend{
			Content: p.Text, Reference: ref, AllowedMentions: noPings(),
			Files: []*discordgo.File{{Name: name, ContentType: p.MIME, Reader: bytes.NewReader(data)}},
		}, nonce)
		return err
	})
}

func extFor(m string) string {
	switch {
	case strings.HasPrefix(m, "audio/ogg"):
		return ".ogg"
	case strings.HasPrefix(m, "audio/mpeg"):
		return ".mp3"
	case strings.HasPrefix(m, "image/png"):
		return ".png"
	case strings.HasPrefix(m, "image/jpeg"):
		return ".jpg"
	}
	return ".bin"
}
