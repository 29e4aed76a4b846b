package discord_test

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"gateway/channels"
	"gateway/channels/discord"
	"gateway/channels/discord/discordtest"
	"gateway/internal/fakeserver"
)

// The payloads below have the shape of MESSAGE_CREATE data as Discord's gateway sends it
// (field order, nulls, nonce, avatar decorations and all), with ids replaced. They are
// dispatched byte for byte through the fake gateway to the real discordgo client.

const author = `{"username":"alice","public_flags":0,"primary_guild":null,"id":"1001","global_name":"Alice","discriminator":"0","collectibles":null,"clan":null,"avatar_decoration_data":null,"avatar":"a1b2c3d4e5f60718293a4b5c6d7e8f90"}`

const stickerAlone = `{"type":0,"tts":false,"timestamp":"2025-03-02T10:15:30.123000+00:00","sticker_items":[{"name":"Wave","id":"749054660769218631","format_type":1}],"pinned":false,"nonce":"1345678901234567680","mentions":[],"mention_roles":[],"mention_everyone":false,"id":"1345678901500000001","flags":0,"embeds":[],"edited_timestamp":null,"content":"","components":[],"channel_id":"{{DM}}","author":` + author + `,"attachments":[]}`

// A forward: empty content, flag HAS_SNAPSHOT (16384), a message_reference of type 1 and
// the forwarded message, without author or id, in message_snapshots.
const forwardText = `{"type":0,"tts":false,"timestamp":"2025-03-02T10:16:02.911000+00:00","pinned":false,"nonce":"1345679035311210496","message_snapshots":[{"message":{"type":0,"timestamp":"2025-03-01T18:02:11.456000+00:00","mentions":[{"username":"bob","public_flags":0,"id":"2002","global_name":"Bob","discriminator":"0","avatar":null}],"mention_roles":[],"flags":0,"embeds":[],"edited_timestamp":null,"content":"Meeting moved to <t:1740855600:F>, ask <@2002> in <#{{CHAN}}> <:partyparrot:1234567890123456>\nand bring </standup report:1100000000000000077>","components":[],"attachments":[]}}],"message_reference":{"type":1,"message_id":"1345500000000000042","guild_id":"81000000000000000","channel_id":"{{CHAN}}"},"mentions":[],"mention_roles":[],"mention_everyone":false,"id":"1345679035500000002","flags":16384,"embeds":[],"edited_timestamp":null,"content":"","components":[],"channel_id":"{{DM}}","author":` + author + `,"attachments":[]}`

// A forward of a picture with a comment in the same message, and of a bot's rich embed.
const forwardFileWithComment = `{"type":0,"tts":false,"timestamp":"2025-03-02T10:17:44.020000+00:00","pinned":false,"nonce":"1345679463046332416","message_snapshots":[{"message":{"type":0,"timestamp":"2025-02-28T09:00:00.000000+00:00","mentions":[],"mention_roles":[],"flags":0,"embeds":[{"type":"rich","title":"Build failed","description":"main: 3 tests failing","fields":[{"name":"Job","value":"lint","inline":true}],"color":15548997}],"edited_timestamp":null,"content":"","components":[],"attachments":[{"width":640,"url":"{{FILE}}","size":9,"proxy_url":"{{FILE}}","placeholder":"X/cFBwA3d3d3d3eHeHh4eHiAeA==","id":"1345000000000000123","height":480,"filename":"screenshot.png","content_type":"image/png","content_scan_version":2}]}}],"message_reference":{"type":1,"message_id":"1345400000000000099","channel_id":"1345400000000000001"},"mentions":[],"mention_roles":[],"mention_everyone":false,"id":"1345679463500000003","flags":16384,"embeds":[],"edited_timestamp":null,"content":"what does this mean?","components":[],"channel_id":"{{DM}}","author":` + author + `,"attachments":[]}`

const poll = `{"type":0,"tts":false,"timestamp":"2025-03-02T10:19:05.700000+00:00","poll":{"question":{"text":"Lunch?"},"results":{"is_finalized":false,"answer_counts":[]},"layout_type":1,"expiry":"2025-03-03T10:19:05.692000+00:00","answers":[{"poll_media":{"text":"Pizza","emoji":{"name":"🍕","id":null}},"answer_id":1},{"poll_media":{"text":"Salad"},"answer_id":2}],"allow_multiselect":true},"pinned":false,"nonce":"1345679805540614144","mentions":[],"mention_roles":[],"mention_everyone":false,"id":"1345679805700000004","flags":0,"embeds":[],"edited_timestamp":null,"content":"","components":[],"channel_id":"{{DM}}","author":` + author + `,"attachments":[]}`

// A picture with no text at all.
const imageAlone = `{"type":0,"tts":false,"timestamp":"2025-03-02T10:20:00.000000+00:00","pinned":false,"nonce":"1345680000000000000","mentions":[],"mention_roles":[],"mention_everyone":false,"id":"1345680000500000005","flags":0,"embeds":[],"edited_timestamp":null,"content":"","components":[],"channel_id":"{{DM}}","author":` + author + `,"attachments":[{"width":640,"url":"{{FILE}}","size":9,"proxy_url":"{{FILE}}","id":"1345680000000000124","height":480,"filename":"cat.png","content_type":"image/png"}]}`

// A forward of a bot's layout message whose components include a type newer than
// discordgo v0.29.0 knows (99 here). Note the key order: components come before id and
// author, as in Discord's own payloads.
const forwardNewComponent = `{"type":0,"tts":false,"timestamp":"2025-03-02T10:21:00.000000+00:00","pinned":false,"nonce":"1345680200000000000","message_snapshots":[{"message":{"type":0,"timestamp":"2025-03-01T08:00:00.000000+00:00","mentions":[],"mention_roles":[],"flags":32768,"embeds":[],"edited_timestamp":null,"content":"","components":[{"type":17,"id":1,"components":[{"type":10,"id":2,"content":"Server restarts at noon"},{"type":99,"id":3}]}],"attachments":[]}}],"message_reference":{"type":1,"message_id":"1345400000000000777","channel_id":"1345400000000000001"},"mentions":[],"mention_roles":[],"mention_everyone":false,"id":"1345680200500000006","flags":16384,"embeds":[],"edited_timestamp":null,"content":"","components":[],"channel_id":"{{DM}}","author":` + author + `,"attachments":[]}`

func replay(t *testing.T, srv *discordtest.Server, payload string, vars ...string) string {
	t.Helper()
	id, err := srv.InjectRaw([]byte(strings.NewReplacer(vars...).Replace(payload)))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestRealPayloadsAreNeverSilent(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	e := start(t, srv, discord.Config{Access: defaultAccess()})
	const dm = "1345000000000000001"
	// The channel a forwarded message came from: one the bot can see, so it has a name.
	srv.InjectGuild("710", "2002", "makes channel 710 known; no mention, so not for the bot", false)
	png := []byte("\x89PNG\r\n\x1a\nx")

	replay(t, srv, stickerAlone, "{{DM}}", dm)
	if m := e.sink.Next(t); m.Text() != "[The user sent a sticker: Wave]" || m.ChatID != dm || m.ChatType != channels.ChatDM {
		t.Errorf("sticker alone: chat %s text %q", m.ChatID, m.Text())
	}

	replay(t, srv, forwardText, "{{DM}}", dm, "{{CHAN}}", "710")
	m := e.sink.Next(t)
	want := "[The user forwarded a message]\n" +
		"> Meeting moved to 2025-03-01 19:00 UTC, ask @Bob in #chan-710 :partyparrot:\n" +
		"> and bring /standup report"
	if m.Text() != want {
		t.Errorf("forward:\n got %q\nwant %q", m.Text(), want)
	}
	if m.ReplyTo != nil {
		t.Errorf("a forward was taken for a reply to %+v", m.ReplyTo)
	}

	file := srv.HostFile(discordtest.File{Name: "screenshot.png", ContentType: "image/png", Data: png})
	replay(t, srv, forwardFileWithComment, "{{DM}}", dm, "{{FILE}}", file)
	m = e.sink.Next(t)
	want = "what does this mean?\n" +
		"[The user forwarded a message]\n" +
		"> [Embed: Build failed — main: 3 tests failing — Job: lint]"
	if m.Text() != want {
		t.Errorf("forward with a comment:\n got %q\nwant %q", m.Text(), want)
	}
	if len(m.Parts) != 3 || m.Parts[2].Type != channels.PartImage || m.Parts[2].Name != "screenshot.png" {
		t.Fatalf("forward with a comment: parts %+v; want the comment, the forward and its picture", m.Parts)
	}
	if b, err := os.ReadFile(m.Parts[2].Path); err != nil || !bytes.Equal(b, png) {
		t.Errorf("the forwarded picture was not saved as sent (%v)", err)
	}

	replay(t, srv, poll, "{{DM}}", dm)
	if m := e.sink.Next(t); m.Text() != `[The user sent a poll: "Lunch?"; answers: 🍕 Pizza / Salad (more than one answer may be chosen)]` {
		t.Errorf("poll: %q", m.Text())
	}

	file = srv.HostFile(discordtest.File{Name: "cat.png", ContentType: "image/png", Data: png})
	replay(t, srv, imageAlone, "{{DM}}", dm, "{{FILE}}", file)
	m = e.sink.Next(t)
	if len(m.Parts) != 1 || m.Parts[0].Type != channels.PartImage || m.Parts[0].Name != "cat.png" {
		t.Errorf("picture alone: parts %+v", m.Parts)
	}

	// discordgo cannot decode this one whole; the message still reaches the model.
	replay(t, srv, forwardNewComponent, "{{DM}}", dm)
	if m := e.sink.Next(t); m.ChatID != dm || m.Text() != "[The user forwarded a message]\n> Server restarts at noon" {
		t.Errorf("forward of a layout message with a new component type: chat %q text %q", m.ChatID, m.Text())
	}
	e.sink.ExpectNone(t, 200*time.Millisecond)
}

func TestGuildMarkupBecomesWords(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	bot := srv.Bot()
	srv.SetRoles(bot.ID, "4242")
	srv.SetRoleName("77", "moderators")
	e := start(t, srv, discord.Config{Access: defaultAccess()})

	srv.Inject(discordtest.Incoming{ChannelID: "710", Guild: true, AuthorID: user, MentionBot: true,
		Content:      "ping <@&77> and <@&4242> about <#710>, <#999> and <@3003> <a:dance:1200000000000000001>",
		MentionRoles: []string{"77", "4242"}})
	want := "ping @moderators and about #chan-710, #channel and @unknown-user :dance:"
	if m := e.sink.Next(t); m.Text() != want {
		t.Errorf("markup:\n got %q\nwant %q", m.Text(), want)
	}
	// A mention and nothing else is still someone speaking to the bot.
	srv.InjectGuild("710", user, "", true)
	if m := e.sink.Next(t); m.Text() != "[The user mentioned you without writing anything else]" {
		t.Errorf("bare mention: %q", m.Text())
	}
	// The names were looked up once each, not per message.
	srv.Inject(discordtest.Incoming{ChannelID: "710", Guild: true, AuthorID: user, MentionBot: true,
		Content: "again <@&77> <#999>", MentionRoles: []string{"77"}})
	if m := e.sink.Next(t); m.Text() != "again @moderators #channel" {
		t.Errorf("second time: %q", m.Text())
	}
	roles, chans := 0, 0
	for _, c := range srv.Calls() {
		switch {
		case strings.HasSuffix(c.Path, "/roles"):
			roles++
		case strings.HasSuffix(c.Path, "/channels/999"):
			chans++
		}
	}
	if roles != 1 || chans != 1 {
		t.Errorf("%d role and %d channel look-ups; want one each, then the cache", roles, chans)
	}
}

// A forward of a file alone, as Discord sends it: the forward's header is the adapter's
// word, not the user's.
const forwardFileAlone = `{"type":0,"tts":false,"timestamp":"2025-03-02T10:22:00.000000+00:00","pinned":false,"nonce":"1345680400000000000","message_snapshots":[{"message":{"type":0,"timestamp":"2025-02-28T09:00:00.000000+00:00","mentions":[],"mention_roles":[],"flags":0,"embeds":[],"edited_timestamp":null,"content":"","components":[],"attachments":[{"width":640,"url":"{{FILE}}","size":9,"proxy_url":"{{FILE}}","id":"1345000000000000125","height":480,"filename":"chart.png","content_type":"image/png"}]}}],"message_reference":{"type":1,"message_id":"1345400000000000100","channel_id":"1345400000000000001"},"mentions":[],"mention_roles":[],"mention_everyone":false,"id":"1345680400500000007","flags":16384,"embeds":[],"edited_timestamp":null,"content":"","components":[],"channel_id":"{{DM}}","author":` + author + `,"attachments":[]}`

// A forward whose file cannot be downloaded: with a comment (or forwarded text) the words
// go on to the agent with a note; a forwarded file alone is only told to the user, as the
// forward's header is no text of theirs.
func TestForwardedFileThatFailsKeepsTheWords(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	e := start(t, srv, discord.Config{Access: defaultAccess()})
	const dm = "1345000000000000002"
	const told = "Sorry, I could not download your attachment. Please send it again."
	png := []byte("\x89PNG\r\n\x1a\nx")

	srv.FailNext(1, fakeserver.Failure{Method: "getAttachment", Status: 500})
	replay(t, srv, forwardFileWithComment, "{{DM}}", dm, "{{FILE}}", srv.HostFile(discordtest.File{Name: "screenshot.png", ContentType: "image/png", Data: png}))
	m := e.sink.Next(t)
	want := "what does this mean?\n" +
		"[The user forwarded a message]\n" +
		"> [Embed: Build failed — main: 3 tests failing — Job: lint]\n" +
		"[The user also sent an image (screenshot.png), which could not be downloaded]"
	if m.Text() != want || m.HasRefs() {
		t.Errorf("forward with a comment:\n got %q\nwant %q", m.Text(), want)
	}
	waitFor(t, "the user told", func() bool { return len(srv.Posted(dm)) == 1 })

	srv.FailNext(1, fakeserver.Failure{Method: "getAttachment", Status: 500})
	replay(t, srv, forwardFileAlone, "{{DM}}", dm, "{{FILE}}", srv.HostFile(discordtest.File{Name: "chart.png", ContentType: "image/png", Data: png}))
	waitFor(t, "the user told", func() bool { return len(srv.Posted(dm)) == 2 })
	for i, p := range srv.Posted(dm) {
		if p.Content != told {
			t.Errorf("told %d: %q; want %q", i, p.Content, told)
		}
	}
	e.sink.ExpectNone(t, 200*time.Millisecond)
}
