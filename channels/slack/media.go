package slack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"gateway/channels"
)

var _ channels.Fetcher = (*Channel)(nil)

// fileRef is what a file part's Ref holds: enough to download it later, in Fetch. It holds
// no token: Fetch adds the bot token to the request.
type fileRef struct {
	ID   string `json:"id"`
	URL  string `json:"url"`
	Name string `json:"name,omitempty"`
	Size int64  `json:"size"` // as Slack announced it
	MIME string `json:"mime,omitempty"`
	Idx  int    `json:"idx"` // the file's place in the message, for a distinct path
	// Text: the message carries words besides its files (its own text, a forwarded
	// message), which must reach the agent even when no file can be fetched. Journaled
	// with the reference: after a restart the text parts no longer tell them from our
	// own notes (a file that cannot be opened).
	Text bool `json:"text,omitempty"`
}

// fileRefs lists the message's downloadable files as parts holding a reference (Part.Ref);
// the others are described in words by textParts. text says the message has words of its own.
func fileRefs(ev inner, text bool) []channels.Part {
	var parts []channels.Part
	for i, f := range ev.Files {
		if !downloadable(f) {
			continue
		}
		u := f.URLPrivateDownload
		if u == "" {
			u = f.URLPrivate
		}
		ref, _ := json.Marshal(fileRef{ID: f.ID, URL: u, Name: f.Name, Size: int64(f.Size), MIME: f.Mimetype, Idx: i, Text: text})
		p := channels.Part{Type: channels.PartFile, MIME: f.Mimetype, Name: f.Name, Size: int64(f.Size), Ref: string(ref)}
		switch {
		case strings.HasPrefix(f.Mimetype, "audio/") || f.MediaDisplayType == "audio":
			p.Type = channels.PartAudio
			p.Voice = f.MediaDisplayType == "audio" // an audio clip recorded in Slack
			p.Duration = float64(f.DurationMs) / 1000
		case strings.HasPrefix(f.Mimetype, "image/"):
			p.Type = channels.PartImage
		}
		parts = append(parts, p)
	}
	return parts
}

// Fetch downloads msg's referenced files (see channels.Fetcher) with the bot token, within
// max_file_bytes. A file over the limit is refused before any download. The user is told
// in plain words about the files that failed. When nothing is left for the agent (no other
// file, no text) the error is what to tell the user; otherwise the rest goes on with a
// note for the agent, so that the text is never lost with its file.
func (c *Channel) Fetch(ctx context.Context, msg *channels.Message) error {
	if !msg.HasRefs() {
		return nil
	}
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		c.log.Error("slack: cannot create the download directory", "err", err)
		return errors.New("Sorry, I could not save your file just now. Please send it again.")
	}
	c.prune()
	f := channels.FetchRefs(msg.Parts, func(p channels.Part) (channels.Part, channels.Refusal) { return c.fetchPart(ctx, msg, p) })
	return f.Settle(ctx, msg, channels.AnyRef(f.Refused, func(r fileRef) bool { return r.Text }), missingNote, func(text string) { c.notice(ctx, channels.TargetOf(msg), text) })
}

// missingNote tells the agent that files it does not see came with the message, and why.
func missingNote(f channels.Fetched) string {
	return f.Note(func(p channels.Part) string {
		what := "a file"
		switch {
		case p.Voice:
			what = "an audio clip"
		case p.Type == channels.PartAudio:
			what = "an audio file"
		case p.Type == channels.PartImage:
			what = "an image"
		}
		if p.Name != "" {
			what += " (" + p.Name + ")"
		}
		return what
	}, "files of this message", func(p channels.Part) string { return displayName(p.Name) })
}

// fetchPart downloads one referenced part; refusal, when set, is what to tell the user.
func (c *Channel) fetchPart(ctx context.Context, msg *channels.Message, p channels.Part) (channels.Part, channels.Refusal) {
	var r fileRef
	if err := json.Unmarshal([]byte(p.Ref), &r); err != nil || r.URL == "" {
		c.log.Warn("slack: a file reference could not be read; the user is told", "chat", msg.ChatID, "err", err)
		return channels.Part{}, notFetched(p)
	}
	if !c.fileHost(r.URL) {
		// The bot token goes with the download: only to Slack's own hosts (or the API's).
		c.log.Warn("slack: a file reference points outside Slack; not downloaded, the user is told", "file", r.ID, "chat", msg.ChatID)
		return channels.Part{}, notFetched(p)
	}
	limit := c.cfg.maxFileBytes()
	if r.Size > limit {
		return channels.Part{}, tooLarge(p, r.Size, limit)
	}
	path := filepath.Join(c.dir, fmt.Sprintf("%s-%s-%d-%s", safeName(msg.ChatID), safeName(strings.ReplaceAll(msg.ID, ".", "")), r.Idx, safeName(r.Name)))
	n, err := c.fetch(ctx, r.URL, path, limit)
	switch {
	case errors.Is(err, channels.ErrTooLarge):
		return channels.Part{}, tooLarge(p, 0, limit) // Slack announced a smaller size
	case err != nil:
		c.log.Warn("slack: could not download a file; the user is told", "file", r.ID, "chat", msg.ChatID, "err", c.scrub.Wrap(err))
		return channels.Part{}, notFetched(p)
	}
	p.Ref, p.Path, p.Size = "", path, n
	return p, channels.Refusal{}
}

// fileHost reports whether the bot token may be sent to raw: an http(s) URL on slack.com or
// slack-edge.com, or on the host of channels.slack.api_url (a proxy, a test's fake).
func (c *Channel) fileHost(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") {
		return false
	}
	host := strings.ToLower(u.Hostname())
	if api, err := url.Parse(c.cfg.APIURL); err == nil && strings.EqualFold(api.Hostname(), host) {
		return true
	}
	for _, domain := range []string{"slack.com", "slack-edge.com"} {
		if host == domain || strings.HasSuffix(host, "."+domain) {
			return u.Scheme == "https"
		}
	}
	return false
}

// notFetched is the refusal of p when it could not be downloaded; of a recording, that it
// was not heard.
func notFetched(p channels.Part) channels.Refusal {
	if p.Type == channels.PartAudio {
		return channels.Refuse(fmt.Sprintf("Sorry, I could not download %s, so I haven't heard it. Please send it again.", recordingName(p)))
	}
	return channels.Refuse(fmt.Sprintf("Sorry, I could not download %s. Please send it again.", displayName(p.Name)))
}

// recordingName names an audio part for its sender: a clip recorded in Slack has a name of
// Slack's making, not theirs.
func recordingName(p channels.Part) string {
	switch {
	case p.Voice:
		return "your audio clip"
	case p.Name == "":
		return "your audio file"
	}
	return p.Name
}

// fetch downloads url to path, stopping past limit bytes (channels.ErrTooLarge). The
// bytes go to a temporary file renamed to path when complete, so that a download cut
// short (or fetched again, after a restart) never leaves a partial file at path.
func (c *Channel) fetch(ctx context.Context, url, path string, limit int64) (int64, error) {
	var n int64
	over := false
	err := c.transfer.Do(ctx, "", func(ctx context.Context) error {
		f, err := os.CreateTemp(filepath.Dir(path), ".download-*")
		if err != nil {
			return err
		}
		defer os.Remove(f.Name()) // a no-op after the rename
		w := &limitWriter{w: f, left: limit}
		err = c.api.GetFileContext(ctx, url, w)
		n = w.n
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if over = w.over; over {
			return channels.ErrTooLarge
		}
		if err != nil {
			return err
		}
		return os.Rename(f.Name(), path)
	})
	if over {
		return n, channels.ErrTooLarge // Do's error is scrubbed: it no longer says so
	}
	return n, err
}

type limitWriter struct {
	w    io.Writer
	n    int64
	left int64
	over bool
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.left {
		l.over = true
		return 0, channels.ErrTooLarge
	}
	n, err := l.w.Write(p)
	l.n += int64(n)
	l.left -= int64(n)
	return n, err
}

// tooLarge is the refusal of p over the limit (size 0: unknown); of a recording, that it
// was not heard.
func tooLarge(p channels.Part, size, limit int64) channels.Refusal {
	what := displayName(p.Name)
	if p.Type == channels.PartAudio {
		what = recordingName(p)
	}
	return channels.TooLarge(what, p.Type, size, limit)
}

// safeName keeps a file name usable in a path: letters, digits, dot, dash, underscore.
func safeName(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
		if b.Len() >= 80 {
			break
		}
	}
	out := strings.TrimLeft(b.String(), ".")
	if out == "" {
		return "file"
	}
	return out
}
