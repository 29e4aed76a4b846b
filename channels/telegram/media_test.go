package telegram_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-telegram/bot/models"

	"gateway/channels"
	"gateway/channels/channeltest"
	"gateway/channels/telegram"
	"gateway/channels/telegram/telegramtest"
	"gateway/internal/fakeserver"
)

// texts lists what the bot posted in chat.
func texts(f *fixture, chat int64) []string {
	var out []string
	for _, m := range f.srv.Messages(chat) {
		out = append(out, m.Text)
	}
	return out
}

// A voice note whose download fails (the file server answers 404, slowly) holds up no other
// chat: a text from another chat sent meanwhile is delivered before the failure is known.
// The sender is told in plain words, the update is confirmed to Telegram (the offset moves
// on) and it is not fetched again. An expired file (getFile refuses it) is told the same way.
func TestFailedDownloadIsToldAndHoldsUpNobody(t *testing.T) {
	f := newFixture(t)
	cfg := f.config()
	cfg.AllowFrom = append(cfg.AllowFrom, "2002")
	sink := channeltest.NewSink()
	f.srv.Slow("file", 5*time.Second)
	f.start(cfg, f.options(), sink)

	voiceUpdate, _ := f.srv.Send(telegramtest.Update{ChatID: 1001, Voice: []byte("OggS voice"), DownloadStatus: 404})
	eventually(t, "the voice note's download", func() bool { return len(f.srv.Calls("file")) > 0 })
	f.srv.Send(telegramtest.Update{ChatID: 2002, From: &models.User{ID: 2002, FirstName: "Bob"}, Text: "anyone there?"})
	m := sink.Next(t)
	if m.Text() != "anyone there?" {
		t.Fatalf("delivered %q; want the other chat's text", m.Text())
	}
	if got := texts(f, 1001); len(got) != 0 {
		t.Fatalf("the failed download was answered (%q) before the other chat's message was delivered: it held the intake", got)
	}
	want := "I couldn't download that voice note from Telegram, so I haven't heard it. Please send it again."
	eventually(t, "the plain-language answer to the voice note", func() bool { return len(f.srv.Messages(1001)) > 0 })
	if got := texts(f, 1001); !slices.Equal(got, []string{want}) {
		t.Errorf("the sender got %q; want %q", got, want)
	}
	eventually(t, "the update to be confirmed", func() bool {
		calls := f.srv.Calls("getUpdates")
		off, _ := strconv.ParseInt(calls[len(calls)-1].Params["offset"], 10, 64)
		return off > voiceUpdate && f.srv.Pending() == 0
	})
	time.Sleep(1500 * time.Millisecond) // it used to come again every second
	if n := len(f.srv.Calls("file")); n != 1 {
		t.Errorf("the voice note was downloaded %d times; a 404 is final", n)
	}
	sink.ExpectNone(t, 100*time.Millisecond)

	f.srv.Slow("file", 0)
	f.srv.Send(telegramtest.Update{ChatID: 1001, Photo: []byte("\xff\xd8 a photo"), FileGone: true})
	f.srv.Send(telegramtest.Update{ChatID: 1001, Text: "and this"})
	if m := sink.Next(t); m.Text() != "and this" {
		t.Fatalf("delivered %q; want the text after the expired photo", m.Text())
	}
	if got := texts(f, 1001); len(got) != 2 || got[1] != "I couldn't download that photo from Telegram, so I haven't seen it. Please send it again." {
		t.Errorf("after an expired photo the sender got %q", got)
	}
	sink.ExpectNone(t, 200*time.Millisecond)
}

// A caption is never lost with its file: when a captioned photo, document or voice note
// cannot be fetched (gone, failing, too big), the sender is told in plain words as before,
// and the caption still reaches the agent with a note of what did not arrive, as an album
// with a failed item does. An album none of whose items arrived keeps its caption too. A
// voice note that never arrived is not a voice message: its caption is no transcript.
// Without a caption nothing is left for the agent, and only the sender is told.
func TestCaptionOfFailedMediaReachesTheAgent(t *testing.T) {
	f := newFixture(t)
	sink := channeltest.NewSink()
	f.start(f.config(), f.options(), sink)
	cases := []struct {
		name   string
		u      telegramtest.Update
		notice string
		note   string
	}{
		{"photo gone (404)", telegramtest.Update{Photo: []byte("\xff\xd8 a photo"), Caption: "gone photo", DownloadStatus: 404},
			"I couldn't download that photo from Telegram, so I haven't seen it. Please send it again.",
			"[The user also sent a photo, which could not be downloaded]"},
		{"document failing (500)", telegramtest.Update{Document: []byte("%PDF-1.4"), DocumentName: "r.pdf", DocumentMIME: "application/pdf",
			Caption: "gone doc", DownloadStatus: 500},
			"I couldn't download that document from Telegram, so I haven't seen it. Please send it again.",
			"[The user also sent a document, which could not be downloaded]"},
		{"voice note too big", telegramtest.Update{Voice: []byte("OggS tiny"), FileSize: 31 << 20, Caption: "big voice"},
			"Sorry, that voice note is too large for me (31 MB; I can take up to 20 MB), so I haven't heard it.",
			"[The user also sent a voice note, which is larger than the 20 MB this gateway accepts]"},
		{"audio file gone (404)", telegramtest.Update{Audio: []byte("ID3 a song"), AudioName: "song.mp3", Caption: "gone song", DownloadStatus: 404},
			"I couldn't download that audio file from Telegram, so I haven't heard it. Please send it again.",
			"[The user also sent an audio file, which could not be downloaded]"},
	}
	for _, tc := range cases {
		tc.u.ChatID = 1001
		before := len(f.srv.Messages(1001))
		f.srv.Send(tc.u)
		m := sink.Next(t)
		if want := tc.u.Caption + "\n" + tc.note; m.Text() != want {
			t.Errorf("%s: the agent got %q; want %q", tc.name, m.Text(), want)
		}
		if len(m.Parts) != 2 || m.IsVoice || m.HasRefs() {
			t.Errorf("%s: delivered parts %+v (voice %v); want the caption and the note only", tc.name, m.Parts, m.IsVoice)
		}
		if got := texts(f, 1001)[before:]; !slices.Equal(got, []string{tc.notice}) {
			t.Errorf("%s: the sender was told %q; want %q", tc.name, got, tc.notice)
		}
	}

	before := len(f.srv.Messages(1001))
	for i := range 2 {
		u := telegramtest.Update{ChatID: 1001, MediaGroupID: "lost", Photo: []byte{0xff, 0xd8, byte(i)}, DownloadStatus: 404}
		if i == 1 {
			u.Caption = "both gone"
		}
		f.srv.Send(u)
	}
	m := sink.Next(t)
	if want := "both gone\n[2 of the 2 items of this album could not be downloaded]"; m.Text() != want {
		t.Errorf("the album that did not arrive reached the agent as %q; want %q", m.Text(), want)
	}
	if got := texts(f, 1001)[before:]; len(got) != 1 || !strings.Contains(got[0], "couldn't download that photo") {
		t.Errorf("after the album the sender was told %q", got)
	}

	before = len(f.srv.Messages(1001))
	f.srv.Send(telegramtest.Update{ChatID: 1001, Photo: []byte("\xff\xd8 no caption"), DownloadStatus: 404})
	f.srv.Send(telegramtest.Update{ChatID: 1001, Text: "after"})
	if m := sink.Next(t); m.Text() != "after" {
		t.Errorf("delivered %q; a photo without a caption that did not arrive leaves nothing for the agent", m.Text())
	}
	if got := texts(f, 1001)[before:]; !slices.Equal(got, []string{"I couldn't download that photo from Telegram, so I haven't seen it. Please send it again."}) {
		t.Errorf("after the uncaptioned photo the sender was told %q", got)
	}
	sink.ExpectNone(t, 200*time.Millisecond)
}

// rawSink is a channeltest.Sink that does not fetch: the test sees what the gateway journals.
type rawSink struct{ *channeltest.Sink }

// A message with media is handed to the gateway (which journals it) as a reference before
// its update is confirmed to Telegram; its download happens later, on the gateway's side.
// A download still under way when the channel stopped is not lost: after the restart the
// gateway fetches the journaled message again, and Telegram does not send it again. Its
// caption does not go on alone with the download cut short: the message stays whole.
func TestMediaInFlightAtStopIsDeliveredAfterRestart(t *testing.T) {
	f := newFixture(t)
	f.srv.Slow("file", time.Minute)
	first := channeltest.NewSink()
	ch := f.start(f.config(), f.options(), rawSink{first})
	voiceUpdate, _ := f.srv.Send(telegramtest.Update{ChatID: 1001, Voice: []byte("OggS hello"), Caption: "listen"})
	m := first.Next(t)
	if !m.HasRefs() || len(m.Parts) != 2 || m.Parts[1].Type != channels.PartAudio || m.Parts[1].Path != "" || !m.IsVoice {
		t.Fatalf("delivered %+v; want the voice note as a reference, not yet downloaded", m.Parts)
	}
	if n := len(f.srv.Calls("file")); n != 0 {
		t.Fatalf("the intake downloaded the file (%d calls) before handing the message over", n)
	}
	eventually(t, "the update to be confirmed", func() bool {
		calls := f.srv.Calls("getUpdates")
		off, _ := strconv.ParseInt(calls[len(calls)-1].Params["offset"], 10, 64)
		return off > voiceUpdate && f.srv.Pending() == 0
	})
	// The gateway's fetch is under way when the channel stops.
	ctx, cancel := context.WithCancel(context.Background())
	fetched := make(chan error, 1)
	inFlight := *m
	inFlight.Parts = slices.Clone(m.Parts)
	go func() { fetched <- ch.Fetch(ctx, &inFlight) }()
	eventually(t, "the download to start", func() bool { return len(f.srv.Calls("file")) > 0 })
	stop(t, ch)
	cancel()
	if err := <-fetched; err == nil || !inFlight.HasRefs() {
		t.Fatalf("the download cut by the stop left %+v (err %v); want a failure, the reference kept", inFlight.Parts, err)
	}

	f.srv.Slow("file", 0)
	second := channeltest.NewSink()
	ch = f.start(f.config(), f.options(), rawSink{second})
	// The gateway replays its journal: the same message, fetched again.
	fctx, fcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer fcancel()
	if err := ch.Fetch(fctx, m); err != nil {
		t.Fatalf("fetching the journaled message after the restart: %v", err)
	}
	if len(m.Parts) != 2 || m.Text() != "listen" || m.Parts[1].Ref != "" || !m.IsVoice ||
		!bytes.Equal(channeltest.PartBytes(t, m.Parts[1]), []byte("OggS hello")) {
		t.Fatalf("after the restart fetched %+v; want the voice note", m.Parts)
	}
	second.ExpectNone(t, 300*time.Millisecond)
}

// Whatever a person sends the bot reaches the agent, as text or as a short description;
// service messages (a member joined, a pin) do not.
func TestEveryKindOfMessageReachesTheAgent(t *testing.T) {
	f := newFixture(t)
	sink := channeltest.NewSink()
	f.start(f.config(), f.options(), sink)
	cases := []struct {
		edit func(m *models.Message)
		want []string
	}{
		{func(m *models.Message) { m.Dice = &models.Dice{Emoji: "🎯", Value: 4} }, []string{"🎯", "4"}},
		{func(m *models.Message) {
			m.Poll = &models.Poll{Question: "Lunch?", Options: []models.PollOption{{Text: "pizza"}, {Text: "soup"}}}
		}, []string{"poll", "Lunch?", "pizza", "soup"}},
		{func(m *models.Message) {
			m.Venue = &models.Venue{Title: "Café Central", Address: "Herrengasse 14", Location: models.Location{Latitude: 48.21, Longitude: 16.37}}
		}, []string{"Café Central", "Herrengasse 14"}},
		{func(m *models.Message) { m.Location = &models.Location{Latitude: 52.52, Longitude: 13.405} }, []string{"location", "52.52"}},
		{func(m *models.Message) { m.Contact = &models.Contact{FirstName: "Ada", PhoneNumber: "+4912345"} }, []string{"contact", "Ada", "+4912345"}},
		{func(m *models.Message) { m.Animation = &models.Animation{FileID: "a"} }, []string{"GIF"}},
		{func(m *models.Message) { m.Video = &models.Video{FileID: "v", Duration: 7}; m.Caption = "my dog" }, []string{"my dog", "video"}},
		{func(m *models.Message) { m.Game = &models.Game{Title: "Tetris"} }, []string{"Tetris"}},
		{func(m *models.Message) { m.Story = &models.Story{ID: 1} }, []string{"story"}},
		{func(m *models.Message) {}, []string{"cannot show"}}, // a kind this SDK does not know yet
	}
	for _, c := range cases {
		f.srv.Send(telegramtest.Update{ChatID: 1001, Edit: c.edit})
		m := sink.Next(t)
		for _, w := range c.want {
			if !strings.Contains(m.Text(), w) {
				t.Errorf("delivered %q; want it to mention %q", m.Text(), w)
			}
		}
	}
	f.srv.Send(telegramtest.Update{ChatID: 1001, Edit: func(m *models.Message) {
		m.PinnedMessage = &models.MaybeInaccessibleMessage{Message: &models.Message{ID: 5, Date: 1, Chat: m.Chat, Text: "pinned"}}
	}})
	f.srv.Send(telegramtest.Update{ChatID: -700, Edit: func(m *models.Message) {
		m.NewChatMembers = []models.User{{ID: telegramtest.BotID, IsBot: true, FirstName: "Gateway"}}
	}})
	// The Bot API's name since 6.0, which the SDK's types lack.
	f.srv.SendMessageJSON(fmt.Sprintf(`{"message_id":900,"date":1,"chat":{"id":1001,"type":"private","first_name":"Alice"},`+
		`"from":{"id":%d,"is_bot":false,"first_name":"Alice"},"video_chat_started":{}}`, telegramtest.UserID))
	f.srv.Send(telegramtest.Update{ChatID: 1001, Text: "marker"})
	if m := sink.Next(t); m.Text() != "marker" {
		t.Errorf("a service message reached the agent as %q", m.Text())
	}
}

// An album (three photos sharing a media_group_id, the caption on the second) is one
// message: every photo and the caption, delivered once. In a group the mention in the
// caption admits the whole album.
func TestAlbumIsOneMessage(t *testing.T) {
	f := newFixture(t)
	sink := channeltest.NewSink()
	f.start(f.config(), f.options(), sink)
	for _, chat := range []int64{1001, -800} {
		group := "album" + strconv.FormatInt(chat, 10)
		for i := range 3 {
			u := telegramtest.Update{ChatID: chat, MediaGroupID: group, Photo: bytes.Repeat([]byte{0xff, 0xd8, byte(i)}, 10)}
			if i == 1 {
				u.Caption = "which one is best?"
				if chat < 0 {
					mention := "@" + telegramtest.BotUsername
					u.Caption = mention + " which one is best?"
					u.Edit = func(m *models.Message) {
						m.CaptionEntities = []models.MessageEntity{{Type: models.MessageEntityTypeMention, Length: len(mention)}}
					}
				}
			}
			f.srv.Send(u)
			if i == 0 {
				time.Sleep(200 * time.Millisecond) // items may come in different polls
			}
		}
		m := sink.Next(t)
		var images int
		for i, p := range m.Parts {
			if p.Type == channels.PartImage {
				images++
				if got := channeltest.PartBytes(t, p); len(got) != 30 {
					t.Errorf("chat %d: image %d has %d bytes", chat, i, len(got))
				}
			}
		}
		if images != 3 || m.Text() != "which one is best?" || m.ChatID != strconv.FormatInt(chat, 10) {
			t.Errorf("chat %d: the album arrived as text %q with %d images; want one message with the caption and 3 photos", chat, m.Text(), images)
		}
		if chat < 0 && !m.Mentioned {
			t.Errorf("the album's mention was lost")
		}
		sink.ExpectNone(t, 1500*time.Millisecond)
	}
}

// An album's updates are confirmed to Telegram only once the album was delivered: when the
// gateway does not take it, every item comes again and the album is delivered once, whole,
// with its photos as references.
func TestAlbumIsConfirmedOnlyOnceDelivered(t *testing.T) {
	f := newFixture(t)
	base := channeltest.NewSink()
	var refusals atomic.Int32
	refusals.Store(1)
	refusing := funcSink{Sink: base, deliver: func(ctx context.Context, m *channels.Message) error {
		if refusals.Add(-1) >= 0 {
			return channels.ErrNotAccepted
		}
		return base.Deliver(ctx, m)
	}}
	f.start(f.config(), f.options(), refusing)
	var last int64
	for i := range 3 {
		u := telegramtest.Update{ChatID: 1001, MediaGroupID: "album-a", Photo: bytes.Repeat([]byte{0xff, 0xd8, byte(i)}, 10)}
		if i == 0 {
			u.Caption = "three"
		}
		last, _ = f.srv.Send(u)
		if off := lastOffset(f); off > last {
			t.Fatalf("item %d was confirmed (offset %d) before the album was delivered", i, off)
		}
	}
	m := base.Next(t)
	refs := 0
	for _, p := range m.Parts {
		if p.Type == channels.PartImage && p.Ref != "" {
			refs++
		}
	}
	if refs != 3 || m.Text() != "three" {
		t.Fatalf("delivered %q with %d photo references; want the whole album once", m.Text(), refs)
	}
	eventually(t, "the album's updates to be confirmed", func() bool { return lastOffset(f) > last && f.srv.Pending() == 0 })
	base.ExpectNone(t, 1500*time.Millisecond)
}

// lastOffset is the offset of the latest getUpdates call.
func lastOffset(f *fixture) int64 {
	calls := f.srv.Calls("getUpdates")
	if len(calls) == 0 {
		return 0
	}
	off, _ := strconv.ParseInt(calls[len(calls)-1].Params["offset"], 10, 64)
	return off
}

// Media answers carry what Telegram shows: in a group topic each file goes to the topic and
// quotes the user, a voice note is named voice.ogg and says how long it is, a file keeps its
// name (or its path's), and the bytes arrive whole. In a DM nothing quotes and no topic or
// unknown duration is sent.
func TestMediaAnswersCarryTheirFields(t *testing.T) {
	f := newFixture(t)
	f.chats(-100, 1001)
	ch := f.start(f.config(), f.options(), channeltest.NewSink())
	voice := []byte("OggS\x00\x02 OpusHead a voice note")
	song := bytes.Repeat([]byte("ID3 song "), 100)
	chart := bytes.Repeat([]byte{0x89, 'P', 'N', 'G'}, 50)
	chartPath := filepath.Join(t.TempDir(), "chart.png")
	if err := os.WriteFile(chartPath, chart, 0o600); err != nil {
		t.Fatal(err)
	}
	notes := []byte("notes, unnamed")
	group := channels.Target{Channel: telegram.Name, ChatID: "-100", ThreadID: "42", ChatType: channels.ChatGroup, ReplyToID: "77"}
	answer(t, ch, group, channels.Frame{Type: channels.FrameParts, Parts: []channels.Part{
		{Type: channels.PartAudio, MIME: "audio/ogg", Voice: true, Data: voice, Duration: 2.4},
		{Type: channels.PartAudio, MIME: "audio/mpeg", Name: "song.mp3", Data: song, Duration: 61.6},
		{Type: channels.PartImage, MIME: "image/png", Path: chartPath},
		{Type: channels.PartFile, MIME: "text/plain", Data: notes},
	}}, done(""))

	want := []struct {
		method, field, name, duration string
		data                          []byte
	}{
		{"sendVoice", "voice", "voice.ogg", "2", voice},
		{"sendAudio", "audio", "song.mp3", "62", song},
		{"sendPhoto", "photo", "chart.png", "", chart},
		{"sendDocument", "document", "file", "", notes},
	}
	for _, w := range want {
		calls := f.srv.Calls(w.method)
		if len(calls) != 1 {
			t.Errorf("%s was called %d times; want once", w.method, len(calls))
			continue
		}
		p := calls[0].Params
		if p["chat_id"] != "-100" || p["message_thread_id"] != "42" || p["duration"] != w.duration {
			t.Errorf("%s sent chat_id %q, message_thread_id %q, duration %q; want -100, 42, %q",
				w.method, p["chat_id"], p["message_thread_id"], p["duration"], w.duration)
		}
		var reply struct {
			MessageID int  `json:"message_id"`
			Allow     bool `json:"allow_sending_without_reply"`
		}
		if err := json.Unmarshal([]byte(p["reply_parameters"]), &reply); err != nil || reply.MessageID != 77 || !reply.Allow {
			t.Errorf("%s sent reply_parameters %q; want a quote of 77 that may go without it", w.method, p["reply_parameters"])
		}
		if p[w.field+".filename"] != w.name || !bytes.Equal(calls[0].Files[w.field], w.data) {
			t.Errorf("%s sent %q (%d bytes); want %q with the part's %d bytes", w.method, p[w.field+".filename"], len(calls[0].Files[w.field]), w.name, len(w.data))
		}
	}
	if msgs := f.srv.Messages(-100); len(msgs) != 4 || msgs[0].Kind != "voice" || msgs[0].ThreadID != 42 || msgs[0].ReplyTo != 77 {
		t.Errorf("the topic shows %+v; want the four files, the voice note first, quoting 77", msgs)
	}

	// The first attempt fails (502): the retry uploads the whole file again.
	f.srv.FailNext(1, fakeserver.Failure{Method: "sendVoice", Status: 502})
	answer(t, ch, channels.Target{Channel: telegram.Name, ChatID: "1001", ChatType: channels.ChatDM},
		channels.Frame{Type: channels.FrameParts, Parts: []channels.Part{{Type: channels.PartAudio, MIME: "audio/ogg", Voice: true, Data: voice}}}, done(""))
	calls := f.srv.Calls("sendVoice")[1:]
	if len(calls) != 2 || calls[0].Status != 502 || calls[1].Status != 200 {
		t.Fatalf("the DM voice note took %d attempts; want the failed one and a retry", len(calls))
	}
	for i, c := range calls {
		p := c.Params
		for _, k := range []string{"message_thread_id", "reply_parameters", "duration"} {
			if v, ok := p[k]; ok {
				t.Errorf("a DM voice note without a known duration sent %s=%q; want it left out", k, v)
			}
		}
		if p["chat_id"] != "1001" || p["voice.filename"] != "voice.ogg" || !bytes.Equal(c.Files["voice"], voice) {
			t.Errorf("attempt %d of the DM voice note went to %q as %q with %d bytes; want 1001, voice.ogg, %d bytes",
				i+1, p["chat_id"], p["voice.filename"], len(c.Files["voice"]), len(voice))
		}
	}
	if msgs := f.srv.Messages(1001); len(msgs) != 1 || msgs[0].Kind != "voice" {
		t.Errorf("the DM shows %+v; want the voice note once", msgs)
	}
}
