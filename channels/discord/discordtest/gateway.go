package discordtest

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

const (
	opDispatch       = 0
	opHeartbeat      = 1
	opIdentify       = 2
	opResume         = 6
	opInvalidSession = 9
	opHello          = 10
	opHeartbeatACK   = 11

	maxReplay    = 1000 // events kept per session for RESUME
	writeTimeout = 5 * time.Second
)

type payload struct {
	Op int             `json:"op"`
	D  json.RawMessage `json:"d"`
	S  *int64          `json:"s,omitempty"`
	T  string          `json:"t,omitempty"`
}

// gwConn serialises writes to one socket: dispatches and the read loop both write.
type gwConn struct {
	mu sync.Mutex
	ws *websocket.Conn
}

func (c *gwConn) write(v any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.ws.SetWriteDeadline(time.Now().Add(writeTimeout))
	return c.ws.WriteJSON(v)
}

func (c *gwConn) writeRaw(b []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.ws.SetWriteDeadline(time.Now().Add(writeTimeout))
	return c.ws.WriteMessage(websocket.TextMessage, b)
}

func (c *gwConn) closeWith(code int, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(time.Second))
	_ = c.ws.Close()
}

type logged struct {
	seq  int64
	data []byte
}

// session is one bot's gateway session: it outlives sockets so that RESUME can replay.
type session struct {
	id      string
	bot     Bot
	intents int

	mu      sync.Mutex
	conn    *gwConn
	seq     int64
	sentSeq int64 // highest sequence written to a live socket
	log     []logged
}

func (ss *session) live() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.conn != nil
}

// dispatch sends an event now, or keeps it for replay while the socket is down.
func (ss *session) dispatch(t string, d any) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.seq++
	seq := ss.seq
	raw, _ := json.Marshal(d)
	b, _ := json.Marshal(payload{Op: opDispatch, T: t, S: &seq, D: raw})
	ss.log = append(ss.log, logged{seq: seq, data: b})
	if len(ss.log) > maxReplay {
		ss.log = ss.log[len(ss.log)-maxReplay:]
	}
	ss.sendLocked(seq, b)
}

func (ss *session) sendLocked(seq int64, b []byte) {
	if ss.conn == nil {
		return
	}
	if err := ss.conn.writeRaw(b); err != nil {
		_ = ss.conn.ws.Close()
		ss.conn = nil
		return
	}
	ss.sentSeq = max(ss.sentSeq, seq)
}

// resume attaches c and replays what came after seq, then RESUMED. False when the
// events after seq are no longer kept.
func (ss *session) resume(c *gwConn, seq int64) (int, bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.log) > 0 && ss.log[0].seq > seq+1 {
		return 0, false
	}
	if ss.conn != nil && ss.conn != c {
		_ = ss.conn.ws.Close()
	}
	ss.conn = c
	replayed := 0
	for _, e := range ss.log {
		if e.seq > seq {
			ss.sendLocked(e.seq, e.data)
			replayed++
		}
	}
	ss.seq++
	s := ss.seq
	b, _ := json.Marshal(payload{Op: opDispatch, T: "RESUMED", S: &s, D: json.RawMessage(`{"_trace":["fake"]}`)})
	ss.log = append(ss.log, logged{seq: s, data: b})
	ss.sendLocked(s, b)
	return replayed, true
}

// drop closes the socket without a close frame and returns the last sequence sent on it.
func (ss *session) drop() int64 {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.conn != nil {
		_ = ss.conn.ws.UnderlyingConn().Close()
		ss.conn = nil
	}
	return ss.sentSeq
}

func (ss *session) closeWith(code int, reason string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.conn != nil {
		ss.conn.closeWith(code, reason)
		ss.conn = nil
	}
}

func (ss *session) detach(c *gwConn) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.conn == c {
		ss.conn = nil
	}
}

func (s *Server) record(op Op) {
	op.Time = time.Now()
	s.mu.Lock()
	s.ops = append(s.ops, op)
	s.mu.Unlock()
}

func (s *Server) serveGateway(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	refuse := s.refuse
	if refuse {
		s.refused++
	}
	s.mu.Unlock()
	if refuse {
		http.Error(w, "gateway unavailable", http.StatusServiceUnavailable)
		return
	}
	up := websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}
	ws, err := up.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	c := &gwConn{ws: ws}
	defer ws.Close()
	ws.SetReadLimit(1 << 20)
	s.mu.Lock()
	hb, stall := s.heartbeat, s.stall
	s.mu.Unlock()
	if stall {
		for {
			if _, _, err := ws.ReadMessage(); err != nil {
				return
			}
		}
	}
	if c.write(map[string]any{"op": opHello, "d": map[string]any{"heartbeat_interval": hb.Milliseconds()}}) != nil {
		return
	}
	var sess *session
	for {
		_, data, err := ws.ReadMessage()
		if err != nil {
			if sess != nil {
				sess.detach(c)
				// Discord invalidates a session the client closed normally (1000/1001).
				var ce *websocket.CloseError
				if errors.As(err, &ce) && (ce.Code == websocket.CloseNormalClosure || ce.Code == websocket.CloseGoingAway) {
					s.mu.Lock()
					delete(s.sessions, sess.id)
					s.mu.Unlock()
				}
			}
			return
		}
		var p payload
		if json.Unmarshal(data, &p) != nil {
			c.closeWith(4002, "Error while decoding payload.")
			return
		}
		switch p.Op {
		case opHeartbeat:
			var seq int64
			_ = json.Unmarshal(p.D, &seq)
			s.record(Op{Op: opHeartbeat, BotID: botID(sess), Seq: seq})
			if c.write(map[string]any{"op": opHeartbeatACK}) != nil {
				return
			}
		case opIdentify:
			var d struct {
				Token   string `json:"token"`
				Intents int    `json:"intents"`
			}
			_ = json.Unmarshal(p.D, &d)
			bot, ok := s.botByToken(strings.TrimPrefix(d.Token, "Bot "))
			s.record(Op{Op: opIdentify, BotID: bot.ID, Intents: d.Intents})
			if !ok {
				c.closeWith(4004, "Authentication failed.")
				return
			}
			if sess != nil && sess.live() {
				sess.detach(c)
			}
			sess = s.newSession(bot, d.Intents, c)
		case opResume:
			var d struct {
				Token     string `json:"token"`
				SessionID string `json:"session_id"`
				Seq       int64  `json:"seq"`
			}
			_ = json.Unmarshal(p.D, &d)
			bot, ok := s.botByToken(strings.TrimPrefix(d.Token, "Bot "))
			if !ok {
				s.record(Op{Op: opResume, SessionID: d.SessionID, Seq: d.Seq})
				c.closeWith(4004, "Authentication failed.")
				return
			}
			s.mu.Lock()
			ss := s.sessions[d.SessionID]
			reject := s.rejectResumes > 0 || ss == nil || ss.bot.ID != bot.ID
			if s.rejectResumes > 0 {
				s.rejectResumes--
			}
			if reject {
				delete(s.sessions, d.SessionID)
			}
			s.mu.Unlock()
			if !reject {
				if n, ok := ss.resume(c, d.Seq); ok {
					s.record(Op{Op: opResume, BotID: bot.ID, SessionID: d.SessionID, Seq: d.Seq, Resumed: true, Replayed: n})
					sess = ss
					continue
				}
				s.mu.Lock()
				delete(s.sessions, d.SessionID)
				s.mu.Unlock()
			}
			s.record(Op{Op: opResume, BotID: bot.ID, SessionID: d.SessionID, Seq: d.Seq})
			if c.write(map[string]any{"op": opInvalidSession, "d": false}) != nil {
				return
			}
		}
	}
}

func botID(ss *session) string {
	if ss == nil {
		return ""
	}
	return ss.bot.ID
}

func (s *Server) newSession(bot Bot, intents int, c *gwConn) *session {
	ss := &session{id: randHex(16), bot: bot, intents: intents, conn: c}
	s.mu.Lock()
	s.sessions[ss.id] = ss
	ready := map[string]any{
		"v":                  9,
		"user":               s.userLocked(bot.ID),
		"session_id":         ss.id,
		"resume_gateway_url": "ws" + strings.TrimPrefix(s.URL, "http") + "/ws",
		"guilds":             []map[string]any{{"id": s.guildID, "unavailable": true}},
		"private_channels":   []any{},
		"application":        map[string]any{"id": bot.ID, "flags": 0},
	}
	s.mu.Unlock()
	ss.dispatch("READY", ready)
	return ss
}

// dispatchMessage sends MESSAGE_CREATE to every session that may see m: all bots for
// guild messages (with GUILD_MESSAGES), the DM's bot for DMs (with DIRECT_MESSAGES).
// Bots receive their own messages too, as on Discord.
func (s *Server) dispatchMessage(m *Message) {
	type out struct {
		ss *session
		w  wireMessage
	}
	var outs []out
	s.dispatchMu.Lock()
	defer s.dispatchMu.Unlock()
	s.mu.Lock()
	ch := s.channels[m.ChannelID]
	for _, ss := range s.sessions {
		if m.GuildID != "" {
			if ss.intents&IntentGuildMessages == 0 {
				continue
			}
		} else if ss.intents&IntentDirectMessages == 0 || ch == nil || (ss.bot.ID != ch.dmBot && ss.bot.ID != m.AuthorID) {
			continue
		}
		outs = append(outs, out{ss, s.wireLocked(m, ss.bot.ID, ss.intents, 0)})
	}
	s.mu.Unlock()
	for _, o := range outs {
		o.ss.dispatch("MESSAGE_CREATE", o.w)
	}
}
