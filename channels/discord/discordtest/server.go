// Package discordtest is a fake Discord for tests: the REST API (v9 routes the adapter
// uses) and the gateway WebSocket, on 127.0.0.1, driven by the real discordgo client.
//
// It keeps channels, threads, messages and attachments in memory (a channel is known once a
// user wrote in it, or a test added it: AddDM, AddGuildChannel; a call about any other is
// refused with 404 Unknown Channel, as Discord refuses one the bot cannot see), dispatches
// MESSAGE_CREATE with sequence numbers to every connected bot session, replays missed
// events on RESUME, serves channel history (GET messages with after/before/limit), answers
// a create with enforce_nonce and a nonce seen in the last minutes with the message made
// first (posting nothing), and
// can fail on demand: 429 with retry_after, 5xx, dropped sockets, rejected resumes,
// sessions ended while messages are posted (InvalidateSessions, EndSessions with a close
// code), a gateway that refuses connections (RefuseGateway), revoked tokens, slow and
// expired attachment downloads (HoldDownloads, ExpireAttachmentURLs). Every REST
// call and gateway op is recorded.
package discordtest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"gateway/internal/fakeserver"
)

// MaxContent is Discord's limit on message content, in characters (runes).
const MaxContent = 2000

// Message flags and intents the fake understands.
const (
	FlagVoiceMessage = 1 << 13

	// Gateway ops recorded in Op.Op.
	OpHeartbeat = 1
	OpIdentify  = 2
	OpResume    = 6

	IntentGuildMessages  = 1 << 9
	IntentDirectMessages = 1 << 12
	IntentMessageContent = 1 << 15
)

// Bot is a bot account the fake knows.
type Bot struct {
	ID    string
	Name  string
	Token string // without the "Bot " prefix
}

// File is an attachment: one a user sends, or one a bot uploaded.
type File struct {
	Name         string
	ContentType  string
	Data         []byte
	DurationSecs float64 // voice messages
	Waveform     string  // voice messages: base64 amplitude samples
}

// Message is a message as the fake stores it.
type Message struct {
	ID           string
	ChannelID    string // the channel or thread it was posted in
	ParentID     string // the thread's parent channel when ChannelID is a thread
	GuildID      string // "" in DMs
	AuthorID     string
	AuthorName   string
	AuthorBot    bool
	Content      string
	Edits        int
	Flags        int
	Files        []File
	ReferenceID  string // message_reference.message_id
	Mentions     []string
	MentionRoles []string
	Time         time.Time
	EditTimes    []time.Time
	Nonce        string // the create's nonce, "" without one
}

// Call is one REST request the fake answered.
type Call struct {
	Method  string
	Path    string
	Status  int
	Bot     string // the bot id the token belongs to, "" when unauthenticated
	Query   string // the raw query string of GET channel messages
	Payload []byte // JSON payload of message create/edit (payload_json for multipart)
	Time    time.Time
}

// Op is one gateway payload the fake received from a client.
type Op struct {
	Op        int
	BotID     string // "" when the token was rejected
	SessionID string // RESUME: the session asked for
	Seq       int64  // HEARTBEAT and RESUME: the client's last sequence number
	Intents   int    // IDENTIFY
	Resumed   bool   // RESUME accepted (else answered with INVALID_SESSION or 4004)
	Replayed  int    // RESUME: events replayed before RESUMED
	Time      time.Time
}

type channel struct {
	id, guildID, parentID string
	typ                   int    // 0 guild text, 1 DM, 11 public thread
	dmBot                 string // the bot a DM channel talks to
}

// Server is a running fake. Its methods are safe for concurrent use.
type Server struct {
	URL string // the api_url to configure: REST under /api/v9, gateway at /ws/

	fs    *fakeserver.Server
	calls fakeserver.Log[Call]
	fails fakeserver.Failures

	// dispatchMu makes every message reach all sessions before the next one does, so a
	// bot's answer never overtakes, at another bot, the message it answers.
	dispatchMu sync.Mutex

	mu            sync.Mutex
	bots          []Bot
	revoked       map[string]bool
	guildID       string
	roles         map[string][]string // guildID/userID -> role ids
	roleNames     map[string]string   // role id -> name, in the one guild
	channels      map[string]*channel
	messages      map[string]*Message
	order         []string // message ids, oldest first
	typing        map[string]int
	ops           []Op
	rejectResumes int
	nextID        uint64
	heartbeat     time.Duration
	stall         bool
	refuse        bool
	refused       int // gateway connections refused (RefuseGateway)
	sessions      map[string]*session
	appCommands   map[string][]AppCommand  // bot id -> its application commands
	interactions  map[string]*interaction  // by interaction id
	holds         map[string]chan struct{} // channel id -> closed when its held downloads may go on
	heldNow       int                      // attachment downloads waiting on a hold
	urlGen        int                      // attachment URLs carry it; ExpireAttachmentURLs moves it on
}

// New starts a fake with one bot and stops it when the test ends.
func New(t testing.TB) *Server {
	s := &Server{
		revoked:   map[string]bool{},
		guildID:   "81000000000000000",
		roles:     map[string][]string{},
		roleNames: map[string]string{},
		channels:  map[string]*channel{},
		messages:  map[string]*Message{},
		typing:    map[string]int{},
		nextID:    1_100_000_000_000_000_000,
		heartbeat: time.Second,
		sessions:  map[string]*session{},
		holds:     map[string]chan struct{}{},
	}
	s.fs = fakeserver.New(s.routes())
	s.URL = s.fs.URL
	s.fs.OnClose(s.dropAll)
	s.AddBot("gatewaybot")
	t.Cleanup(s.Close)
	return s
}

// Close drops every gateway connection and stops the server.
func (s *Server) Close() { s.fs.Close() }

func (s *Server) dropAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ss := range s.sessions {
		ss.drop()
	}
}

// AddBot registers another bot account with a fresh token and returns it.
func (s *Server) AddBot(name string) Bot {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := Bot{ID: s.newIDLocked(), Name: name, Token: "fake." + randHex(12) + "." + randHex(16)}
	s.bots = append(s.bots, b)
	return b
}

// Bot is the first bot, the one most tests drive.
func (s *Server) Bot() Bot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bots[0]
}

// GuildID is the one guild every bot is in.
func (s *Server) GuildID() string { return s.guildID }

// SetHeartbeatInterval changes the interval HELLO announces to new connections.
func (s *Server) SetHeartbeatInterval(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.heartbeat = d
}

// StallGateway makes new gateway sockets open and then say nothing (no HELLO), like a
// hung server.
func (s *Server) StallGateway(stall bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stall = stall
}

// RefuseGateway makes new gateway connections fail (503 instead of the WebSocket
// upgrade) while refuse is true, like an outage: the client keeps retrying.
func (s *Server) RefuseGateway(refuse bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse = refuse
}

// Refused reports how many gateway connections were refused (RefuseGateway) so far: the
// attempts a client made while the gateway was down.
func (s *Server) Refused() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused
}

// InvalidateSessions closes every gateway socket abruptly and forgets the sessions, as
// when Discord ends them: the next RESUME is answered with INVALID_SESSION (d: false),
// and the events of the gap are never replayed; the messages stay readable over REST.
func (s *Server) InvalidateSessions() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, ss := range s.sessions {
		ss.drop()
		delete(s.sessions, id)
	}
}

// EndSessions closes every gateway socket with code (4009 "Session timed out", 4007
// "Invalid seq"...) and forgets the sessions, as InvalidateSessions does.
func (s *Server) EndSessions(code int, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, ss := range s.sessions {
		ss.closeWith(code, reason)
		delete(s.sessions, id)
	}
}

// SetRoles gives userID these roles in the guild (GET /guilds/{g}/members/{u}).
func (s *Server) SetRoles(userID string, roles ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.roles[s.guildID+"/"+userID] = roles
}

// FailNext makes the next n calls f applies to fail as Discord fails them: f.Code() 429
// with retry_after in the JSON body and the rate-limit headers, any other status with
// Discord's error JSON. f.Method "" applies to message creates and edits; "createMessage",
// "editMessage", "typing", "getAttachment" (a download), "interactionEdit" (of the original
// response) and "interactionFollowup" name one call. f.Chat limits it to one channel id.
func (s *Server) FailNext(n int, f fakeserver.Failure) { s.fails.Add(n, f) }

// RejectNextResume answers the next RESUME with INVALID_SESSION (d: false) and forgets
// the session, so the client must identify again.
func (s *Server) RejectNextResume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rejectResumes++
}

// Revoke makes token invalid: REST answers 401, the gateway closes its sockets with 4004.
func (s *Server) Revoke(token string) {
	s.mu.Lock()
	s.revoked[token] = true
	var hit []*session
	for _, ss := range s.sessions {
		if ss.bot.Token == token {
			hit = append(hit, ss)
		}
	}
	s.mu.Unlock()
	for _, ss := range hit {
		ss.closeWith(4004, "Authentication failed.")
	}
}

// Drop closes every gateway socket abruptly, mid-conversation, without a close frame.
// Sessions stay resumable; events dispatched while a session is down are replayed on
// RESUME. It returns the highest sequence number written before the drop.
func (s *Server) Drop() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var last int64
	for _, ss := range s.sessions {
		last = max(last, ss.drop())
	}
	return last
}

// Calls lists every REST request answered so far.
func (s *Server) Calls() []Call {
	return s.calls.All()
}

// Ops lists every gateway payload received so far (IDENTIFY, RESUME, HEARTBEAT).
func (s *Server) Ops() []Op {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Op(nil), s.ops...)
}

// Connected reports how many bot sessions have a live socket.
func (s *Server) Connected() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, ss := range s.sessions {
		if ss.live() {
			n++
		}
	}
	return n
}

// Message returns a stored message by id.
func (s *Server) Message(id string) (Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.messages[id]
	if !ok {
		return Message{}, false
	}
	return copyMessage(m), true
}

// Messages lists the messages in channelID and in its threads, oldest first.
func (s *Server) Messages(channelID string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, id := range s.order {
		m := s.messages[id]
		if m.ChannelID == channelID || m.ParentID == channelID {
			out = append(out, copyMessage(m))
		}
	}
	return out
}

// Posted lists what bots posted in channelID and its threads, oldest first.
func (s *Server) Posted(channelID string) []Message {
	var out []Message
	for _, m := range s.Messages(channelID) {
		if m.AuthorBot {
			out = append(out, m)
		}
	}
	return out
}

// PostedBy lists what one bot posted in channelID and its threads, oldest first.
func (s *Server) PostedBy(botID, channelID string) []Message {
	var out []Message
	for _, m := range s.Messages(channelID) {
		if m.AuthorID == botID {
			out = append(out, m)
		}
	}
	return out
}

// Typing counts typing signals sent to channelID and its threads.
func (s *Server) Typing(channelID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for id, c := range s.typing {
		if id == channelID {
			n += c
		} else if ch := s.channels[id]; ch != nil && ch.parentID == channelID {
			n += c
		}
	}
	return n
}

func copyMessage(m *Message) Message {
	c := *m
	c.Files = append([]File(nil), m.Files...)
	c.Mentions = append([]string(nil), m.Mentions...)
	c.MentionRoles = append([]string(nil), m.MentionRoles...)
	c.EditTimes = append([]time.Time(nil), m.EditTimes...)
	return c
}

func (s *Server) newIDLocked() string {
	s.nextID++
	return strconv.FormatUint(s.nextID, 10)
}

// botByAuth resolves an Authorization header ("Bot <token>").
func (s *Server) botByAuth(h string) (Bot, bool) {
	tok, ok := strings.CutPrefix(h, "Bot ")
	if !ok {
		return Bot{}, false
	}
	return s.botByToken(tok)
}

func (s *Server) botByToken(tok string) (Bot, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.revoked[tok] {
		return Bot{}, false
	}
	for _, b := range s.bots {
		if b.Token == tok {
			return b, true
		}
	}
	return Bot{}, false
}

func (s *Server) botByIDLocked(id string) (Bot, bool) {
	for _, b := range s.bots {
		if b.ID == id {
			return b, true
		}
	}
	return Bot{}, false
}

func (s *Server) isBotLocked(id string) bool {
	_, ok := s.botByIDLocked(id)
	return ok
}

// AddDM makes id a DM channel between the first bot and a user, as when the user opens
// it: the bot may post there before anyone wrote in it. Channels an Inject (or a
// command) came from are known already; a post to any other id is refused as Discord
// refuses a channel the bot cannot see (404, code 10003 Unknown Channel).
func (s *Server) AddDM(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.channels[id] == nil {
		s.channels[id] = &channel{id: id, typ: 1, dmBot: s.bots[0].ID}
	}
}

// AddGuildChannel makes id a text channel of the guild, one every bot can see.
func (s *Server) AddGuildChannel(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.channels[id] == nil {
		s.channels[id] = &channel{id: id, typ: 0, guildID: s.guildID}
	}
}

// DeleteChannel deletes channel id, its threads and their messages, as a moderator
// deleting it does: every later call about it is answered 404 Unknown Channel.
func (s *Server) DeleteChannel(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for cid, c := range s.channels {
		if cid == id || c.parentID == id {
			delete(s.channels, cid)
		}
	}
	s.order = slices.DeleteFunc(s.order, func(mid string) bool {
		m := s.messages[mid]
		if m.ChannelID == id || m.ParentID == id {
			delete(s.messages, mid)
			return true
		}
		return false
	})
}

// visibleLocked returns channel id when bot can see it; otherwise it answers as Discord
// does (404 Unknown Channel, or 403 Missing Access for another bot's DM) and returns nil.
func (s *Server) visibleLocked(w http.ResponseWriter, id, bot string) *channel {
	c := s.channels[id]
	switch {
	case c == nil:
		writeErr(w, http.StatusNotFound, 10003, "Unknown Channel")
		return nil
	case c.typ == 1 && c.dmBot != bot:
		writeErr(w, http.StatusForbidden, 50001, "Missing Access")
		return nil
	}
	return c
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return hex.EncodeToString(b)
}

func runeLen(s string) int { return utf8.RuneCountInString(s) }

func userName(id string) string { return "user" + id }

func (s *Server) String() string { return fmt.Sprintf("discordtest.Server(%s)", s.URL) }
