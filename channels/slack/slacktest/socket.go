package slacktest

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Envelope is one Socket Mode envelope the fake has sent or will send.
type Envelope struct {
	ID       string
	EventID  string
	Type     string // inner event type: "message", "app_mention"; "slash_commands" for a command
	Attempts int    // times sent; retry_attempt of the last send is Attempts-1
	Acked    bool
	Dropped  bool            // never acked within the retries
	Payload  json.RawMessage // the payload of the ack, when the app sent one
}

// envSlashCommands is the envelope type of a slash command.
const envSlashCommands = "slash_commands"

type envelope struct {
	Envelope
	channel string // a slash command's channel and user, for its private answer
	user    string
	payload json.RawMessage
	base    int // retry_attempt of the first send: 1 for a redelivered event
	sentAt  time.Time
	conn    *wsConn
}

type socketState struct {
	conns        []*wsConn // live connections, newest last
	accepted     int
	envelopes    []*envelope // every envelope, in order of injection
	byID         map[string]*envelope
	ackTimeout   time.Duration
	pingInterval time.Duration
	maxRetries   int
}

func (st *socketState) setup() {
	st.byID = map[string]*envelope{}
	st.ackTimeout = time.Second
	st.pingInterval = 2 * time.Second
	st.maxRetries = 3 // as Slack: the first send and three retries
}

type wsConn struct {
	c       *websocket.Conn
	out     chan []byte
	done    chan struct{}
	once    sync.Once
	closing bool // a disconnect was sent: no new envelopes go here
}

func (c *wsConn) close() {
	c.once.Do(func() {
		close(c.done)
		c.c.Close()
	})
}

// closeSockets closes every connection; their goroutines then clean up.
func (s *Server) closeSockets() {
	s.mu.Lock()
	conns := append([]*wsConn(nil), s.socket.conns...)
	s.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}

// SetAckTimeout sets how long the fake waits for an envelope's ack before sending it
// again with retry_attempt increased (default 1s).
func (s *Server) SetAckTimeout(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.socket.ackTimeout = d
}

// SetPingInterval sets how often the fake pings each Socket Mode connection (default 2s).
func (s *Server) SetPingInterval(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.socket.pingInterval = d
}

// Connections counts the Socket Mode connections accepted so far.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.socket.accepted
}

// Live counts the open Socket Mode connections that still take envelopes.
func (s *Server) Live() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.socket.conns {
		if !c.closing && !connGone(c) {
			n++
		}
	}
	return n
}

// Envelopes lists every Socket Mode envelope, in order of injection.
func (s *Server) Envelopes() []Envelope {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Envelope, 0, len(s.socket.envelopes))
	for _, e := range s.socket.envelopes {
		out = append(out, e.Envelope)
	}
	return out
}

// Disconnect sends Slack's `disconnect` message on every open connection, as Slack does
// before it rotates a connection, and closes them a moment later. The client is expected
// to open a new connection; envelopes not acked on the old one are sent on the new one.
func (s *Server) Disconnect() {
	s.mu.Lock()
	if s.ctx.Err() != nil {
		s.mu.Unlock()
		return
	}
	var conns []*wsConn
	for _, c := range s.socket.conns {
		if !c.closing {
			c.closing = true
			conns = append(conns, c)
		}
	}
	s.mu.Unlock()
	msg, _ := json.Marshal(map[string]any{"type": "disconnect", "reason": "refresh_requested", "debug_info": map[string]any{"host": "fake-applink"}})
	for _, c := range conns {
		select {
		case c.out <- msg:
		default:
		}
		s.fs.Go(func(context.Context) {
			t := time.NewTimer(time.Second)
			defer t.Stop()
			select {
			case <-t.C:
			case <-c.done:
			case <-s.ctx.Done():
			}
			c.close()
		})
	}
}

// Drop closes every Socket Mode connection abruptly, as a network failure would.
func (s *Server) Drop() {
	s.closeSockets()
}

func (s *Server) serveSocket(w http.ResponseWriter, r *http.Request) {
	// Slack's client sends Origin: https://api.slack.com, which is not this host.
	up := websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}
	c, err := up.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	conn := &wsConn{c: c, out: make(chan []byte, 256), done: make(chan struct{})}
	s.mu.Lock()
	if s.ctx.Err() != nil {
		s.mu.Unlock()
		c.Close()
		return
	}
	s.socket.accepted++
	s.socket.conns = append(s.socket.conns, conn)
	ping := s.socket.pingInterval
	n := len(s.socket.conns)
	s.mu.Unlock()
	hello, _ := json.Marshal(map[string]any{
		"type": "hello", "num_connections": n,
		"connection_info": map[string]any{"app_id": AppID},
		"debug_info":      map[string]any{"host": "fake-applink", "approximate_connection_time": 3600},
	})
	conn.out <- hello
	s.fs.Go(func(context.Context) { s.writeLoop(conn, ping) })
	s.fs.Go(func(context.Context) { s.readLoop(conn) })
	s.poke()
}

func (s *Server) writeLoop(c *wsConn, ping time.Duration) {
	defer c.close()
	t := time.NewTicker(ping)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-s.ctx.Done():
			return
		case b := <-c.out:
			c.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
			if err := c.c.WriteMessage(websocket.TextMessage, b); err != nil {
				return
			}
		case <-t.C:
			if err := c.c.WriteControl(websocket.PingMessage, []byte("ping"), time.Now().Add(5*time.Second)); err != nil {
				return
			}
		}
	}
}

// readLoop takes acks until the connection ends, then forgets the connection so that
// its unacked envelopes go out on another.
func (s *Server) readLoop(c *wsConn) {
	defer func() {
		c.close()
		s.mu.Lock()
		for i, x := range s.socket.conns {
			if x == c {
				s.socket.conns = append(s.socket.conns[:i], s.socket.conns[i+1:]...)
				break
			}
		}
		s.mu.Unlock()
		s.poke()
	}()
	c.c.SetReadLimit(1 << 20)
	for {
		_, b, err := c.c.ReadMessage()
		if err != nil {
			return
		}
		var ack struct {
			EnvelopeID string          `json:"envelope_id"`
			Payload    json.RawMessage `json:"payload"`
		}
		if json.Unmarshal(b, &ack) != nil || ack.EnvelopeID == "" {
			continue
		}
		s.mu.Lock()
		if e := s.socket.byID[ack.EnvelopeID]; e != nil && !e.Acked {
			e.Acked = true
			if len(ack.Payload) > 0 && string(ack.Payload) != "null" {
				e.Payload = ack.Payload
				if e.Type == envSlashCommands {
					s.replyFromPayload(e.channel, e.user, "ack", ack.Payload)
				}
			}
		}
		s.mu.Unlock()
	}
}

// poke wakes the dispatcher.
func (s *Server) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// enqueue adds an envelope for payload; call with mu held.
func (s *Server) enqueue(eventID, typ string, payload json.RawMessage, retry int) *envelope {
	e := &envelope{Envelope: Envelope{ID: s.nextID("env-"), EventID: eventID, Type: typ}, payload: payload, base: retry}
	s.socket.envelopes = append(s.socket.envelopes, e)
	s.socket.byID[e.ID] = e
	return e
}

// dispatch sends pending envelopes on the newest open connection, and sends again
// those not acked in time, until the server closes.
func (s *Server) dispatch(context.Context) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
		}
		s.sendPending()
	}
}

func (s *Server) sendPending() {
	s.mu.Lock()
	defer s.mu.Unlock()
	var conn *wsConn
	for _, c := range s.socket.conns {
		if !c.closing && !connGone(c) {
			conn = c
		}
	}
	now := time.Now()
	for _, e := range s.socket.envelopes {
		if e.Acked || e.Dropped {
			continue
		}
		if e.conn != nil && !connGone(e.conn) && now.Sub(e.sentAt) < s.socket.ackTimeout {
			continue
		}
		if e.Attempts > s.socket.maxRetries {
			e.Dropped = true
			continue
		}
		if conn == nil {
			continue
		}
		frame := map[string]any{
			"envelope_id": e.ID, "type": "events_api", "payload": e.payload,
			"accepts_response_payload": false, "retry_attempt": e.base + e.Attempts, "retry_reason": "",
		}
		if e.Type == envSlashCommands {
			frame["type"], frame["accepts_response_payload"] = envSlashCommands, true
		}
		if e.base+e.Attempts > 0 {
			frame["retry_reason"] = "timeout"
		}
		b, _ := json.Marshal(frame)
		select {
		case conn.out <- b:
			e.Attempts++
			e.sentAt = now
			e.conn = conn
		default: // the connection is backed up; try again on the next tick
		}
	}
}

func connGone(c *wsConn) bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}
