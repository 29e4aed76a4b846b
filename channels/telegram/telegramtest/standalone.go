package telegramtest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"time"

	"gateway/internal/fakeserver"
)

// Options configure a fake started with Start (outside a test).
type Options struct {
	// OnSent, when set, is told of every message the bot posted or edited successfully
	// (sendMessage, editMessageText and the media sends), as the message stands after the
	// call. It runs on the request's goroutine before the answer is written, so it must be
	// quick; benchmarks use it to see an answer arrive without polling.
	OnSent func(m Message)
}

// Start starts a fake on 127.0.0.1 for use outside tests (benchmarks, the `gateway-bench`
// command). The caller must Close it. It is NewServer without a testing.TB.
func Start(opts Options) *Server {
	s := &Server{
		Token:      Token,
		client:     &http.Client{Timeout: 10 * time.Second},
		notify:     make(chan struct{}),
		sent:       map[int64]json.RawMessage{},
		nextUpdate: 100, nextMsg: 1000,
		msgs: map[int64][]*Message{}, typing: map[int64]int{}, known: map[int64]bool{},
		files: map[string]fileEntry{}, paths: map[string]string{}, slow: map[string]time.Duration{},
	}
	var h http.Handler = http.HandlerFunc(s.serve)
	if opts.OnSent != nil {
		h = s.observeSends(opts.OnSent)
	}
	s.fs = fakeserver.New(h)
	s.URL = s.fs.URL
	s.fs.Go(s.pushWebhook)
	return s
}

// observeSends wraps serve: after a successful send it finds the message the answer
// names and hands a copy to fn.
func (s *Server) observeSends(fn func(Message)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw := &captureWriter{ResponseWriter: w}
		s.serve(rw, r)
		if rw.status != http.StatusOK {
			rw.flush()
			return
		}
		var a struct {
			OK     bool            `json:"ok"`
			Result json.RawMessage `json:"result"`
		}
		var m struct {
			ID   int `json:"message_id"`
			Chat struct {
				ID int64 `json:"id"`
			} `json:"chat"`
		}
		if json.Unmarshal(rw.body.Bytes(), &a) == nil && a.OK && json.Unmarshal(a.Result, &m) == nil && m.ID != 0 {
			if msg, ok := s.message(m.Chat.ID, m.ID); ok {
				fn(msg)
			}
		}
		rw.flush()
	})
}

// message returns a copy of the bot's message id in chat.
func (s *Server) message(chat int64, id int) (Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := s.msgs[chat]
	for i := len(list) - 1; i >= 0; i-- { // the newest are the likeliest
		if list[i].ID == id {
			return *list[i], true
		}
	}
	return Message{}, false
}

// captureWriter holds an answer until the observer has seen it, so that the bot never
// sees an answer before the observer does.
type captureWriter struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (c *captureWriter) WriteHeader(status int) { c.status = status }

func (c *captureWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	return c.body.Write(b)
}

func (c *captureWriter) flush() {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	c.ResponseWriter.WriteHeader(c.status)
	_, _ = c.ResponseWriter.Write(c.body.Bytes())
}

// ForgetCalls drops the record of calls (what Calls returns). A long benchmark calls it
// now and then so that the fake's memory stays bounded; the messages in chats stay.
func (s *Server) ForgetCalls() {
	s.calls.Reset()
}
