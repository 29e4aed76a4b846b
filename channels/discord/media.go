package discord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/bwmarrin/discordgo"

	"gateway/channels"
)

// Attachments reach the gateway as references (Part.Ref) and are downloaded by Fetch, on
// the chat's own session goroutine: the worker that reads every Discord chat's messages in
// order never waits on a download, the message is journaled at once, and in cluster mode
// the process answering the chat is the one that downloads.

// downloadTimeout bounds one download, within the ctx Fetch is given.
const downloadTimeout = 2 * time.Minute

// notFetched is the refusal of p when it could not be downloaded; of a recording, that it
// was not heard.
func notFetched(p channels.Part) channels.Refusal {
	if p.Type == channels.PartAudio {
		return channels.Refuse(fmt.Sprintf("Sorry, I could not download your %s, so I haven't heard it. Please send it again.", recording(p)))
	}
	return channels.Refuse("Sorry, I could not download your attachment. Please send it again.")
}

// recording names an audio part as Discord's users do.
func recording(p channels.Part) string {
	if p.Voice {
		return "voice message"
	}
	return "audio file"
}

// fileRef is what an attachment part's Ref holds: what is needed to download it later.
// Discord serves attachments without a token, so none is kept here.
type fileRef struct {
	ID   string `json:"id"` // the attachment's id
	URL  string `json:"url"`
	Name string `json:"name"` // as the user named it
	Size int64  `json:"size"` // as Discord announced it
	MIME string `json:"mime"`
	// File is the name it is saved under: the message id and a running number, so that
	// the attachments of a forward do not overwrite the message's own.
	File string `json:"file"`
	// Channel and Msg say where the message was posted, to read it again for a fresh URL
	// when the signed one has expired (Discord's expire after about a day).
	Channel string `json:"channel"`
	Msg     string `json:"msg"`
	// Text: the message carries something for the agent besides its files (the user's
	// words, a sticker, a poll, a forwarded text), which must reach the agent even when no
	// file can be fetched. Journaled with the reference: after a restart the text parts no
	// longer tell it from our own notes (a forward's header).
	Text bool `json:"text,omitempty"`
}

// attachmentRefs makes the parts of atts, each with a reference to download it by.
// voiceFirst marks the first one as a voice message; n numbers the files of the message.
func attachmentRefs(channel, msgID string, atts []*discordgo.MessageAttachment, voiceFirst bool, n *int) []channels.Part {
	var parts []channels.Part
	for i, a := range atts {
		if a == nil {
			continue
		}
		voice := i == 0 && voiceFirst
		ct := a.ContentType
		if ct == "" {
			ct = mime.TypeByExtension(strings.ToLower(filepath.Ext(a.Filename)))
		}
		if voice && ct == "" {
			ct = "audio/ogg"
		}
		base, _, _ := mime.ParseMediaType(ct)
		if base == "" {
			base = "application/octet-stream"
		}
		r := fileRef{ID: a.ID, URL: a.URL, Name: a.Filename, Size: int64(a.Size), MIME: base,
			File: fmt.Sprintf("%s-%d%s", msgID, *n, safeExt(a.Filename)), Channel: channel, Msg: msgID}
		*n++
		ref, _ := json.Marshal(r)
		parts = append(parts, channels.Part{Type: partType(base, voice), MIME: base, Name: a.Filename, Size: r.Size,
			Duration: a.DurationSecs, Voice: voice, Ref: string(ref)})
	}
	return parts
}

// markText flags the referenced parts as belonging to a message with text (fileRef.Text).
func markText(parts []channels.Part) {
	for i, p := range parts {
		var r fileRef
		if p.Ref == "" || json.Unmarshal([]byte(p.Ref), &r) != nil {
			continue
		}
		r.Text = true
		ref, _ := json.Marshal(r)
		parts[i].Ref = string(ref)
	}
}

// Fetch downloads msg's referenced attachments (see channels.Fetcher) to the media
// directory, each within max_file_bytes: a file announced over the limit is refused
// without a download. The user is told in plain words about any that failed. When nothing
// is left for the agent (no other attachment, no text) the message fails with those
// words; otherwise the rest goes on with a note for the agent, so that the text is never
// lost with its file. It needs no gateway connection: any process may fetch.
func (c *Channel) Fetch(ctx context.Context, msg *channels.Message) error {
	limit := c.cfg.maxFileBytes()
	f := channels.FetchRefs(msg.Parts, func(p channels.Part) (channels.Part, channels.Refusal) { return c.fetchPart(ctx, p, limit) })
	err := f.Settle(ctx, msg, channels.AnyRef(f.Refused, func(r fileRef) bool { return r.Text }), missingNote, func(text string) { c.notice(ctx, msg, text) })
	if err != nil && ctx.Err() != nil {
		return errors.New(notFetched(f.Refused[0]).Text) // whatever the parts said, the download was cut
	}
	return err
}

// missingNote tells the agent that attachments it does not see came with the message, and why.
func missingNote(f channels.Fetched) string {
	return f.Note(func(p channels.Part) string {
		what := "a file"
		switch {
		case p.Voice:
			what = "a voice message"
		case p.Type == channels.PartAudio:
			what = "an audio file"
		case p.Type == channels.PartImage:
			what = "an image"
		}
		if p.Name != "" && !p.Voice {
			what += " (" + p.Name + ")"
		}
		return what
	}, "attachments of this message", nil)
}

// fetchPart downloads one referenced part; refusal, when set, is what to tell the user.
func (c *Channel) fetchPart(ctx context.Context, p channels.Part, limit int64) (channels.Part, channels.Refusal) {
	var r fileRef
	err := json.Unmarshal([]byte(p.Ref), &r)
	if err != nil || r.URL == "" || r.File == "" || r.File != filepath.Base(r.File) || strings.HasPrefix(r.File, ".") {
		c.log.Warn("discord: an attachment reference could not be read; the user is told", "err", err)
		return channels.Part{}, notFetched(p)
	}
	if r.Size > limit {
		return channels.Part{}, (&tooBigError{size: r.Size, limit: limit}).text(p)
	}
	path, size, err := c.download(ctx, r.URL, r.File, limit)
	var gone *goneError
	if errors.As(err, &gone) && ctx.Err() == nil {
		// Fetched late (after a restart, say): the signed URL has expired. Discord hands
		// out a fresh one with the message.
		if u := c.freshURL(ctx, r); u != "" && u != r.URL {
			path, size, err = c.download(ctx, u, r.File, limit)
		}
	}
	var big *tooBigError
	switch {
	case errors.As(err, &big):
		return channels.Part{}, big.text(p)
	case err != nil:
		if ctx.Err() == nil {
			c.log.Warn("discord: attachment download failed; the user is told", "attachment_id", r.ID, "err", c.scrub.Wrap(err))
		}
		return channels.Part{}, notFetched(p)
	}
	p.Ref, p.Path, p.Size = "", path, size
	return p, channels.Refusal{}
}

// freshURL reads the message of r again for the attachment's current URL; "" when it
// cannot (the message was deleted, the API fails: the user is then asked to send it again).
func (c *Channel) freshURL(ctx context.Context, r fileRef) string {
	if r.Channel == "" || r.Msg == "" || r.ID == "" {
		return ""
	}
	endpoint := discordgo.EndpointChannelMessage(r.Channel, r.Msg)
	var body []byte
	err := c.call(ctx, r.Channel, "read a message again for its attachments", func(ctx context.Context) (err error) {
		body, err = c.s.RequestWithBucketID(http.MethodGet, endpoint, nil, discordgo.EndpointChannelMessage(r.Channel, ""), discordgo.WithContext(ctx))
		return unwrapURL(err)
	})
	if err != nil {
		c.log.Warn("discord: could not read a message again for a fresh attachment URL", "chat_id", r.Channel, "message_id", r.Msg, "err", err)
		return ""
	}
	m, err := decodeMessage(body)
	if err != nil {
		return ""
	}
	all := slices.Clone(m.Attachments)
	for _, s := range m.MessageSnapshots {
		if s.Message != nil {
			all = append(all, s.Message.Attachments...)
		}
	}
	for _, a := range all {
		if a != nil && a.ID == r.ID {
			return a.URL
		}
	}
	return ""
}

// goneError is a download answered 403 or 404: an expired signed URL, or a deleted file.
type goneError struct{ status string }

func (e *goneError) Error() string { return "attachment download answered " + e.status }

// tooBigError is an attachment over the limit; size is 0 when unknown (the download
// stopped past the limit).
type tooBigError struct{ size, limit int64 }

func (e *tooBigError) Error() string {
	if e.size <= 0 {
		return fmt.Sprintf("attachment over the %d bytes limit", e.limit)
	}
	return fmt.Sprintf("attachment of %d bytes over the %d limit", e.size, e.limit)
}

// text is the refusal of p over the limit; of a recording, that it was not heard.
func (e *tooBigError) text(p channels.Part) channels.Refusal {
	what := "that file"
	if p.Type == channels.PartAudio {
		what = "that " + recording(p)
	}
	return channels.TooLarge(what, p.Type, e.size, e.limit)
}

func partType(mimeType string, voice bool) channels.PartType {
	switch {
	case voice || strings.HasPrefix(mimeType, "audio/"):
		return channels.PartAudio
	case strings.HasPrefix(mimeType, "image/"):
		return channels.PartImage
	}
	return channels.PartFile
}

// safeExt keeps a short alphanumeric extension of a user-given file name, nothing else of it.
func safeExt(name string) string {
	ext := filepath.Ext(name)
	if len(ext) < 2 || len(ext) > 10 {
		return ""
	}
	for _, r := range ext[1:] {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return ""
		}
	}
	return strings.ToLower(ext)
}

// allowedHost says whether an attachment URL points at Discord's CDN or at api_url.
func (c *Channel) allowedHost(u *url.URL) bool {
	if c.api != nil && u.Host == c.api.Host && u.Scheme == c.api.Scheme {
		return true
	}
	if u.Scheme != "https" {
		return false
	}
	h := u.Hostname()
	return h == "cdn.discordapp.com" || h == "media.discordapp.net"
}

// download saves url to the media directory as name, at most limit bytes. Its errors
// never carry the URL: a signed attachment URL is nobody's business in a log.
func (c *Channel) download(ctx context.Context, rawURL, name string, limit int64) (string, int64, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", 0, errors.New("attachment URL cannot be read")
	}
	if !c.allowedHost(u) {
		return "", 0, fmt.Errorf("attachment URL on an unexpected host %q", u.Host)
	}
	if err := os.MkdirAll(c.mediaDir, 0o700); err != nil {
		return "", 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, downloadTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", 0, unwrapURL(err)
	}
	// Downloads are bounded by ctx, not by the REST client's shorter timeout.
	hc := &http.Client{Transport: c.client.Transport, CheckRedirect: func(r *http.Request, via []*http.Request) error {
		if len(via) >= 5 || !c.allowedHost(r.URL) {
			return fmt.Errorf("attachment redirected to an unexpected host %q", r.URL.Host)
		}
		return nil
	}}
	resp, err := hc.Do(req)
	if err != nil {
		return "", 0, unwrapURL(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusForbidden {
		return "", 0, &goneError{status: resp.Status}
	}
	if resp.StatusCode != http.StatusOK {
		return "", 0, fmt.Errorf("attachment download answered %s", resp.Status)
	}
	f, err := os.CreateTemp(c.mediaDir, ".part-*")
	if err != nil {
		return "", 0, err
	}
	n, err := io.Copy(f, io.LimitReader(resp.Body, limit+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > limit {
		err = &tooBigError{limit: limit} // the read stopped past the limit: its size is unknown
	}
	dst := filepath.Join(c.mediaDir, name)
	if err == nil {
		err = os.Rename(f.Name(), dst)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return "", 0, err
	}
	return dst, n, nil
}
