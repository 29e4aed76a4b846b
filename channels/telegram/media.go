package telegram

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/go-telegram/bot"
	"github.com/go-telegram/bot/models"

	"gateway/channels"
	"gateway/internal/pace"
)

// attachment is one media file of a message, before download.
type attachment struct {
	what     string // how a user would name it: "voice note", "photo", ...
	typ      channels.PartType
	fileID   string
	size     int64 // as Telegram announced it; 0 when unknown
	mime     string
	name     string
	voice    bool
	duration float64
}

// attachments lists the files of msg worth downloading, and notes (as text) what arrived
// that the agent cannot receive as a file, so that it is told even so.
func attachments(msg *message) (list []attachment, notes []string) {
	if v := msg.Voice; v != nil {
		list = append(list, attachment{what: "voice note", typ: channels.PartAudio, fileID: v.FileID, size: v.FileSize,
			mime: orDefault(v.MimeType, "audio/ogg"), voice: true, duration: float64(v.Duration)})
	}
	if a := msg.Audio; a != nil {
		list = append(list, attachment{what: "audio file", typ: channels.PartAudio, fileID: a.FileID, size: a.FileSize,
			mime: orDefault(a.MimeType, "audio/mpeg"), name: a.FileName, duration: float64(a.Duration)})
	}
	if v := msg.VideoNote; v != nil {
		// A round video message is someone speaking: its sound is transcribed like a voice note.
		list = append(list, attachment{what: "video note", typ: channels.PartAudio, fileID: v.FileID, size: int64(v.FileSize),
			mime: "video/mp4", voice: true, duration: float64(v.Duration)})
	}
	if len(msg.Photo) > 0 {
		p := msg.Photo[len(msg.Photo)-1] // sizes come smallest first
		list = append(list, attachment{what: "photo", typ: channels.PartImage, fileID: p.FileID, size: int64(p.FileSize), mime: "image/jpeg", name: "photo.jpg"})
	}
	if d := msg.Document; d != nil {
		typ, what := channels.PartFile, "document"
		switch {
		case strings.HasPrefix(d.MimeType, "image/"):
			typ = channels.PartImage
		case strings.HasPrefix(d.MimeType, "audio/"):
			// A recording sent as a file (an exported voice note, a memo from another
			// app): transcribed like an audio file.
			typ, what = channels.PartAudio, "audio file"
		}
		list = append(list, attachment{what: what, typ: typ, fileID: d.FileID, size: d.FileSize,
			mime: orDefault(d.MimeType, "application/octet-stream"), name: d.FileName})
	}
	// Whatever else a person sent is described in words: the agent is never left with
	// silence. (A caption, when there is one, arrives as the text.)
	switch {
	case msg.Sticker != nil && !msg.Sticker.IsAnimated && !msg.Sticker.IsVideo:
		// A static sticker is a WebP picture: the model sees it.
		st := msg.Sticker
		list = append(list, attachment{what: "sticker", typ: channels.PartImage, fileID: st.FileID, size: int64(st.FileSize),
			mime: "image/webp", name: "sticker.webp"})
		if st.Emoji != "" {
			notes = append(notes, fmt.Sprintf("[The user sent a sticker %s]", st.Emoji))
		}
	case msg.Sticker != nil:
		notes = append(notes, fmt.Sprintf("[The user sent a sticker %s]", msg.Sticker.Emoji))
	case msg.Dice != nil:
		notes = append(notes, fmt.Sprintf("[The user sent an animated %s emoji (a Telegram dice); it landed on %d]", msg.Dice.Emoji, msg.Dice.Value))
	case msg.Video != nil:
		notes = append(notes, fmt.Sprintf("[The user sent a video (%d s); videos are not passed on]", msg.Video.Duration))
	case msg.Animation != nil:
		notes = append(notes, "[The user sent a GIF animation; animations are not passed on]")
	case msg.Venue != nil:
		v := msg.Venue
		notes = append(notes, fmt.Sprintf("[The user shared a place: %s, %s (%.5f, %.5f)]", v.Title, v.Address, v.Location.Latitude, v.Location.Longitude))
	case msg.Location != nil:
		notes = append(notes, fmt.Sprintf("[The user shared a location: %.5f, %.5f]", msg.Location.Latitude, msg.Location.Longitude))
	case msg.Contact != nil:
		notes = append(notes, fmt.Sprintf("[The user shared a contact: %s]", strings.TrimSpace(strings.Join([]string{msg.Contact.FirstName, msg.Contact.LastName, msg.Contact.PhoneNumber}, " "))))
	case msg.Poll != nil:
		var opts []string
		for _, o := range msg.Poll.Options {
			opts = append(opts, o.Text)
		}
		notes = append(notes, fmt.Sprintf("[The user sent a poll: %s (options: %s)]", msg.Poll.Question, strings.Join(opts, " / ")))
	case msg.Checklist != nil:
		var tasks []string
		for _, t := range msg.Checklist.Tasks {
			tasks = append(tasks, t.Text)
		}
		notes = append(notes, fmt.Sprintf("[The user sent a checklist: %s (%s)]", msg.Checklist.Title, strings.Join(tasks, " / ")))
	case msg.Game != nil:
		notes = append(notes, fmt.Sprintf("[The user sent the game %q]", msg.Game.Title))
	case msg.Story != nil:
		notes = append(notes, "[The user forwarded a story; stories are not passed on]")
	case msg.PaidMedia != nil:
		notes = append(notes, "[The user sent paid media; it is not passed on]")
	case msg.Invoice != nil:
		notes = append(notes, fmt.Sprintf("[The user sent an invoice: %s]", msg.Invoice.Title))
	case msg.Giveaway != nil:
		notes = append(notes, "[The user sent a giveaway]")
	case msg.WebAppData != nil:
		notes = append(notes, fmt.Sprintf("[The user sent data from a web app (%s): %s]", msg.WebAppData.ButtonText, msg.WebAppData.Data))
	case msg.UsersShared != nil:
		notes = append(notes, "[The user shared one or more users]")
	case msg.ChatShared != nil:
		notes = append(notes, "[The user shared a chat]")
	}
	return list, notes
}

// isService reports a service message: something Telegram says about the chat (members,
// pins, topics, payments), not something a person wrote to the bot.
func isService(msg *message) bool {
	return len(msg.NewChatMembers) > 0 || msg.LeftChatMember != nil || msg.NewChatTitle != "" || len(msg.NewChatPhoto) > 0 ||
		msg.DeleteChatPhoto || msg.GroupChatCreated || msg.SupergroupChatCreated || msg.ChannelChatCreated ||
		msg.MessageAutoDeleteTimerChanged != nil || msg.MigrateToChatID != 0 || msg.MigrateFromChatID != 0 ||
		msg.PinnedMessage != nil || msg.SuccessfulPayment != nil || msg.RefundedPayment != nil || msg.Gift != nil ||
		msg.UniqueGift != nil || msg.GiftUpgradeSent != nil || msg.ConnectedWebsite != "" || msg.WriteAccessAllowed != nil ||
		msg.PassportData != nil || msg.ProximityAlertTriggered != nil || msg.BoostAdded != nil || msg.ChatBackgroundSet != nil ||
		msg.ChecklistTasksDone != nil || msg.ChecklistTasksAdded != nil || msg.DirectMessagePriceChanged != nil ||
		msg.ForumTopicCreated != nil || msg.ForumTopicEdited != nil || msg.ForumTopicClosed != nil || msg.ForumTopicReopened != nil ||
		msg.GeneralForumTopicHidden != nil || msg.GeneralForumTopicUnhidden != nil || msg.GiveawayCreated != nil ||
		msg.GiveawayWinners != nil || msg.GiveawayCompleted != nil || msg.PaidMessagePriceChanged != nil ||
		msg.ChatOwnerLeft != nil || msg.ChatOwnerChanged != nil || msg.SuggestedPostApproved != nil ||
		msg.SuggestedPostApprovalFailed != nil || msg.SuggestedPostDeclined != nil || msg.SuggestedPostPaid != nil ||
		msg.SuggestedPostRefunded != nil || msg.VoiceChatScheduled != nil || msg.VoiceChatStarted != nil ||
		msg.VoiceChatEnded != nil || msg.VoiceChatParticipantsInvited != nil || msg.VideoChatScheduled != nil ||
		msg.VideoChatStarted != nil || msg.VideoChatEnded != nil || msg.VideoChatParticipantsInvited != nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// fileRef is what a media part's Ref holds: enough to download it later, in Fetch.
type fileRef struct {
	What    string      `json:"what"` // how a user would name it: "voice note", "photo", ...
	FileID  string      `json:"file_id"`
	Chat    int64       `json:"chat"`
	Msg     int         `json:"msg"`
	Idx     int         `json:"idx"`
	Smaller []photoSize `json:"smaller,omitempty"` // a photo's other sizes, largest first
	// Caption: the message carries text the user wrote, which must reach the agent even
	// when no file of it can be fetched. (Journaled with the reference: Fetch may run
	// after a restart, when the text parts no longer tell a caption from our own notes.)
	Caption bool `json:"caption,omitempty"`
}

type photoSize struct {
	FileID string `json:"file_id"`
	Size   int64  `json:"size"`
}

// addMedia adds to m what msg carries besides its text: descriptions of what cannot be
// passed on, and its files as references (Part.Ref), downloaded later by Fetch. captioned
// says m already holds text the user wrote.
func (c *Channel) addMedia(m *channels.Message, msg *message, captioned bool) {
	list, notes := attachments(msg)
	for _, n := range notes {
		m.Parts = append(m.Parts, channels.TextPart(n))
	}
	for i, a := range list {
		r := fileRef{What: a.what, FileID: a.fileID, Chat: msg.Chat.ID, Msg: msg.ID, Idx: i, Caption: captioned}
		if a.what == "photo" {
			for j := len(msg.Photo) - 2; j >= 0; j-- {
				r.Smaller = append(r.Smaller, photoSize{FileID: msg.Photo[j].FileID, Size: int64(msg.Photo[j].FileSize)})
			}
		}
		ref, _ := json.Marshal(r)
		m.Parts = append(m.Parts, channels.Part{Type: a.typ, MIME: a.mime, Name: a.name, Size: a.size,
			Duration: a.duration, Voice: a.voice, Ref: string(ref)})
		if a.typ == channels.PartAudio && a.voice {
			m.IsVoice = true
		}
	}
}

// Fetch downloads msg's referenced files (see channels.Fetcher) under the media directory,
// with getFile and the file URL, within max_file_bytes. A file over the limit, or one that
// could not be fetched (gone, expired, Telegram failing past the retries), is told to the
// user in plain words. When nothing is left for the agent (no other item, no caption) the
// message fails with those words; otherwise the rest goes on, with a note for the agent,
// so that a caption is never lost with its photo.
func (c *Channel) Fetch(ctx context.Context, msg *channels.Message) error {
	f := channels.FetchRefs(msg.Parts, func(p channels.Part) (channels.Part, channels.Refusal) { return c.fetchPart(ctx, p) })
	return f.Settle(ctx, msg, channels.AnyRef(f.Refused, func(r fileRef) bool { return r.Caption }), missingNote, func(text string) { c.notify(ctx, notifyTarget(msg), text) })
}

// missingNote tells the agent that media it does not see came with the message, and why.
func missingNote(f channels.Fetched) string {
	return f.Note(func(p channels.Part) string {
		what := whatOf(p)
		var r fileRef
		if json.Unmarshal([]byte(p.Ref), &r) == nil && r.What != "" {
			what = r.What
		}
		return withArticle(what)
	}, "items of this album", nil)
}

// whatOf names a part the way a user would when its reference no longer says.
func whatOf(p channels.Part) string {
	switch {
	case p.Voice:
		return "voice note"
	case p.Type == channels.PartAudio:
		return "audio file"
	case p.Type == channels.PartImage:
		return "picture"
	}
	return "file"
}

// withArticle puts "a" or "an" before what.
func withArticle(what string) string {
	if what != "" && strings.ContainsRune("aeiou", rune(what[0])) {
		return "an " + what
	}
	return "a " + what
}

// missed says what a file not downloaded means for the user: a recording was not heard,
// anything else not seen.
func missed(typ channels.PartType) string {
	if typ == channels.PartAudio {
		return "heard"
	}
	return "seen"
}

// fetchPart downloads one referenced part; refusal, when set, is what to tell the user.
func (c *Channel) fetchPart(ctx context.Context, p channels.Part) (channels.Part, channels.Refusal) {
	var r fileRef
	if err := json.Unmarshal([]byte(p.Ref), &r); err != nil || r.FileID == "" {
		c.log.Warn("telegram: a media reference could not be read; the user is told", "err", err)
		return channels.Part{}, notFetched(attachment{what: whatOf(p), typ: p.Type})
	}
	a := attachment{what: r.What, typ: p.Type, fileID: r.FileID, size: p.Size, mime: p.MIME, name: p.Name, voice: p.Voice, duration: p.Duration}
	if a.what == "photo" && a.size > c.cfg.MaxFileBytes {
		// Telegram keeps several sizes of a photo: take the largest under the limit.
		for _, ps := range r.Smaller {
			if ps.Size <= c.cfg.MaxFileBytes {
				a.fileID, a.size = ps.FileID, ps.Size
				break
			}
		}
	}
	if a.size > c.cfg.MaxFileBytes {
		return channels.Part{}, c.tooBig(a, a.size)
	}
	got, refusal, err := c.download(ctx, r.Chat, r.Msg, r.Idx, a)
	if err != nil {
		// Out of time (or stopping): told in plain words; when the gateway is shutting
		// down it tells nobody and fetches again after the restart.
		return channels.Part{}, notFetched(a)
	}
	return got, refusal
}

// notifyTarget is msg as notify needs it: its chat, topic and id.
func notifyTarget(msg *channels.Message) *message {
	chat, _ := strconv.ParseInt(msg.ChatID, 10, 64)
	id, _ := strconv.Atoi(msg.ID)
	m := &message{ID: id, Chat: models.Chat{ID: chat, Type: models.ChatTypeSupergroup}}
	if msg.ChatType == channels.ChatDM {
		m.Chat.Type = models.ChatTypePrivate
	}
	if msg.ThreadID != "" {
		m.IsTopicMessage = true
		m.MessageThreadID, _ = strconv.Atoi(msg.ThreadID)
	}
	return m
}

// tooBig is the refusal of a file over max_file_bytes: that it was not downloaded, and so
// not heard or seen.
func (c *Channel) tooBig(a attachment, size int64) channels.Refusal {
	return channels.TooLarge("that "+a.what, a.typ, size, c.cfg.MaxFileBytes)
}

// notFetched is the refusal of a file that could not be downloaded.
func notFetched(a attachment) channels.Refusal {
	return channels.Refuse(fmt.Sprintf("I couldn't download that %s from Telegram, so I haven't %s it. Please send it again.", a.what, missed(a.typ)))
}

// download fetches one attachment with getFile and the file URL, writes it under the
// media directory and returns its part. A failure is final (a refusal for the user);
// only the end of ctx returns an error.
func (c *Channel) download(ctx context.Context, chat int64, msgID int, idx int, a attachment) (channels.Part, channels.Refusal, error) {
	var f *models.File
	err := c.calls.Do(ctx, "", func(ctx context.Context) (err error) {
		f, err = c.api.GetFile(ctx, &bot.GetFileParams{FileID: a.fileID})
		return err
	})
	switch {
	case err != nil && ctx.Err() != nil:
		return channels.Part{}, channels.Refusal{}, ctx.Err()
	case err != nil && strings.Contains(err.Error(), "file is too big"):
		return channels.Part{}, c.tooBig(a, a.size), nil
	case err != nil:
		c.log.Warn("telegram: getFile failed; the user is told", "what", a.what, "chat", chat, "err", err)
		return channels.Part{}, notFetched(a), nil
	}
	if f.FileSize > c.cfg.MaxFileBytes {
		return channels.Part{}, c.tooBig(a, f.FileSize), nil
	}
	ext := path.Ext(f.FilePath)
	if len(ext) > 8 || strings.ContainsAny(ext, `/\`) {
		ext = ""
	}
	dest := filepath.Join(c.mediaDir, fmt.Sprintf("%d_%d_%d%s", chat, msgID, idx, ext))
	var size int64
	err = c.downloads.Do(ctx, "", func(ctx context.Context) (err error) {
		size, err = c.fetch(ctx, f.FilePath, dest)
		return err
	})
	switch {
	case err == nil && size > c.cfg.MaxFileBytes:
		// The download stopped past the limit: its real size is unknown.
		return channels.Part{}, c.tooBig(a, 0), nil
	case err != nil && ctx.Err() != nil:
		return channels.Part{}, channels.Refusal{}, ctx.Err()
	case err != nil:
		c.log.Warn("telegram: a file download failed; the user is told", "what", a.what, "chat", chat, "err", err)
		return channels.Part{}, notFetched(a), nil
	}
	return channels.Part{Type: a.typ, MIME: a.mime, Path: dest, Name: a.name, Size: size, Duration: a.duration, Voice: a.voice}, channels.Refusal{}, nil
}

// fetch downloads a file path of the Bot API into dest, reading at most max_file_bytes:
// a size over it means the download was stopped there and dest not written. Failures worth
// another attempt are marked for the downloads Sender.
func (c *Channel) fetch(ctx context.Context, filePath, dest string) (int64, error) {
	url := strings.TrimRight(c.cfg.APIURL, "/") + "/file/bot" + c.cfg.Token.Reveal() + "/" + filePath
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, c.scrub.wrap(err)
	}
	resp, err := c.opts.HTTPClient.Do(req)
	if err != nil {
		return 0, pace.Transient(fmt.Errorf("telegram: downloading a file: %w", c.scrub.wrap(err)))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		err := fmt.Errorf("telegram: downloading a file: HTTP %d", resp.StatusCode)
		if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
			return 0, pace.Transient(err)
		}
		return 0, err
	}
	tmp, err := os.CreateTemp(c.mediaDir, ".download-*")
	if err != nil {
		return 0, fmt.Errorf("telegram: saving a file: %w", err)
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	n, err := io.Copy(tmp, io.LimitReader(resp.Body, c.cfg.MaxFileBytes+1))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, pace.Transient(fmt.Errorf("telegram: downloading a file: %w", c.scrub.wrap(err)))
	}
	if n > c.cfg.MaxFileBytes {
		return n, nil
	}
	if err := os.Rename(tmp.Name(), dest); err != nil {
		return 0, fmt.Errorf("telegram: saving a file: %w", err)
	}
	return n, nil
}

// janitor deletes downloaded media older than MediaTTL, at start and then hourly, so
// the media directory does not grow without bound.
func (c *Channel) janitor(ctx context.Context) {
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		entries, _ := os.ReadDir(c.mediaDir)
		for _, e := range entries {
			if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > c.opts.MediaTTL {
				_ = os.Remove(filepath.Join(c.mediaDir, e.Name()))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
