package gateway

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"gateway/channels"
	"gateway/harness"
	"gateway/hooks"
	"gateway/internal/llm"
)

// The admin API under /api/v1 (see DESIGN "Admin API"): JSON in and out, guarded like the
// reload endpoint (bearer admin.token; loopback only without one).

// How an injected message reaches the session.
const (
	DeliverSteer    = "steer"     // into the running turn at its next save point
	DeliverFollowup = "followup"  // as a turn of its own after the running one
	DeliverNextTurn = "next_turn" // kept and put before the next turn's prompt
)

const maxAPIBody = 1 << 20

// SendTimeout bounds one POST /api/v1/send: its delivery, paced like any answer, may wait
// out a platform's rate limit. A client gives up later than this, or it cuts the delivery.
const SendTimeout = 2 * time.Minute

// SendRequest is the body of POST /api/v1/send.
type SendRequest struct {
	Channel  string          `json:"channel"`
	ChatID   string          `json:"chat_id"`
	ThreadID string          `json:"thread_id"`
	Text     string          `json:"text"`
	Parts    []channels.Part `json:"parts"`
}

// InjectRequest is the body of POST /api/v1/inject.
type InjectRequest struct {
	Channel   string `json:"channel"`
	ChatID    string `json:"chat_id"`
	ThreadID  string `json:"thread_id"`
	Text      string `json:"text"`
	DeliverAs string `json:"deliver_as"` // steer | followup | next_turn (default followup)
	Trigger   bool   `json:"trigger"`    // an idle session starts a turn
	Wait      string `json:"wait"`       // "" or "delivered"
}

// decodeBody reads the request's one JSON object into v. The status it returns with an
// error is 413 for a body over maxAPIBody, else 400.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) (int, error) {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAPIBody))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		// One object per request: text after it is a mistake in the caller, and reading
		// only the first object would act on half of what was meant.
		if err = dec.Decode(new(json.RawMessage)); err == io.EOF {
			return 0, nil
		} else if err == nil || !isTooLarge(err) {
			return http.StatusBadRequest, errors.New("the body has more after the JSON object; send exactly one object")
		}
	}
	if isTooLarge(err) {
		return http.StatusRequestEntityTooLarge, fmt.Errorf("the body is larger than %d MiB", maxAPIBody>>20)
	}
	return http.StatusBadRequest, fmt.Errorf("the body is not the expected JSON: %w", err)
}

func isTooLarge(err error) bool {
	var tl *http.MaxBytesError
	return errors.As(err, &tl)
}

// apiRoute is one endpoint of the admin API.
type apiRoute struct {
	method, path string
	h            http.HandlerFunc
}

func (g *Gateway) apiRoutes(mux *http.ServeMux, opts HTTPOptions) {
	guard := func(h http.HandlerFunc) http.Handler { return adminOnly(opts.AdminToken, h) }
	routes := []apiRoute{
		{http.MethodPost, "/api/v1/send", g.apiSend},
		{http.MethodPost, "/api/v1/inject", g.apiInject},
		{http.MethodGet, "/api/v1/status", g.apiStatus},
	}
	if opts.Reload != nil {
		routes = append(routes, apiRoute{http.MethodPost, "/api/v1/reload", func(w http.ResponseWriter, r *http.Request) {
			notes, err := opts.Reload()
			if err != nil {
				writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"status": "kept the previous configuration", "error": err.Error()})
				return
			}
			writeJSON(w, http.StatusOK, reloaded(notes))
		}})
	}
	var known []string
	for _, rt := range routes {
		mux.Handle(rt.method+" "+rt.path, guard(rt.h))
		known = append(known, rt.method+" "+rt.path)
	}
	// Anything else under /api/v1/ is answered in JSON too, as the API's clients read it,
	// naming what exists: the mux's own answers are plain text ("404 page not found").
	mux.Handle("/api/v1/", guard(func(w http.ResponseWriter, r *http.Request) {
		for _, rt := range routes {
			if rt.path == r.URL.Path {
				w.Header().Set("Allow", rt.method)
				writeJSON(w, http.StatusMethodNotAllowed, map[string]any{"error": fmt.Sprintf("%s %s: use %s", r.Method, r.URL.Path, rt.method)})
				return
			}
		}
		writeJSON(w, http.StatusNotFound, map[string]any{"error": fmt.Sprintf("no endpoint %s %s (the API has %s)", r.Method, r.URL.Path, strings.Join(known, ", "))})
	}))
}

func (g *Gateway) apiTarget(channel, chat, thread string) (channels.Target, error) {
	if channel == "" || chat == "" {
		return channels.Target{}, errors.New(`"channel" and "chat_id" are required`)
	}
	ch, ok := g.byName[channel]
	if !ok {
		names := make([]string, 0, len(g.byName))
		for n := range g.byName {
			names = append(names, n)
		}
		slices.Sort(names)
		return channels.Target{}, fmt.Errorf("no channel %q (running: %s)", channel, strings.Join(names, ", "))
	}
	t := channels.Target{Channel: channel, ChatID: chat, ThreadID: thread}
	// An id the platform cannot have is the caller's mistake, told before a session is
	// made for it or the platform is asked.
	if err := channels.CheckTarget(ch, t); err != nil {
		return channels.Target{}, err
	}
	return t, nil
}

// apiSend delivers a message to a chat without the model, paced like any answer.
func (g *Gateway) apiSend(w http.ResponseWriter, r *http.Request) {
	var req SendRequest
	if status, err := decodeBody(w, r, &req); err != nil {
		writeJSON(w, status, map[string]any{"error": err.Error()})
		return
	}
	target, err := g.apiTarget(req.Channel, req.ChatID, req.ThreadID)
	if err == nil && req.Text == "" && len(req.Parts) == 0 {
		err = errors.New(`"text" or "parts" is required`)
	}
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": err.Error()})
		return
	}
	// Every part is checked before anything is sent: a chat never gets half a message, and
	// the caller learns what was wrong from the answer rather than from the gateway's log.
	for i := range req.Parts {
		if status, err := g.checkSendPart(i, &req.Parts[i]); err != nil {
			writeJSON(w, status, map[string]any{"error": err.Error()})
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), SendTimeout)
	defer cancel()
	st, err := g.byName[target.Channel].Open(ctx, target)
	if errors.Is(err, channels.ErrBadTarget) {
		// The caller's mistake (a chat id of the wrong form), told as such: nothing failed
		// on the platform, and no gateway:error is due.
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": err.Error()})
		return
	}
	if err == nil && len(req.Parts) > 0 {
		err = st.Send(ctx, channels.Frame{Type: channels.FrameParts, Parts: req.Parts})
	}
	if err == nil {
		err = st.Send(ctx, channels.Frame{Type: channels.FrameDone, Text: req.Text})
	}
	if err != nil {
		g.deliveryFailed(g.Runtime().Bus, sessionOf(target), err)
		writeJSON(w, http.StatusBadGateway, map[string]any{"error": "delivery failed: " + err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "sent"})
}

// injection is an API message on its way into a session's actor.
type injection struct {
	req    InjectRequest
	target channels.Target
	// armed, when set, is told which runtime's bus the message will travel on, so the
	// delivery watch can listen there before anything runs; nil when nobody waits.
	armed func(bus *hooks.Bus)
	res   chan error // the actor's answer: taken (nil) or why not
	// msg, when set, is the message as cluster mode's shared intake handed it back: stored
	// already (its Seq is the intake's), and Replayed when a process that died had it.
	msg *channels.Message
}

// apiInject puts a message into a chat's session (the seed's sendMessage).
func (g *Gateway) apiInject(w http.ResponseWriter, r *http.Request) {
	var req InjectRequest
	if status, err := decodeBody(w, r, &req); err != nil {
		writeJSON(w, status, map[string]any{"error": err.Error()})
		return
	}
	if g.forward != nil {
		// Cluster mode: the chat may be answered by another process; its session is there.
		body, _ := json.Marshal(req)
		if status, out, ok := g.forward(r.Context(), SessionKey(req.Channel, req.ChatID, req.ThreadID), "inject", body); ok {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = w.Write(out)
			return
		}
	}
	status, out := g.inject(r.Context(), req)
	if out != nil {
		writeJSON(w, status, out)
	}
}

// Forwarded runs an admin API request another process forwarded to this one, which holds
// the chat (cluster mode): kind names it ("inject"), body is its JSON. It returns the
// status and JSON body to answer with.
func (g *Gateway) Forwarded(ctx context.Context, kind string, body []byte) (int, []byte) {
	var status int
	var out map[string]any
	switch kind {
	case "inject":
		var req InjectRequest
		if err := json.Unmarshal(body, &req); err != nil {
			status, out = http.StatusBadRequest, map[string]any{"error": "the forwarded request is not readable: " + err.Error()}
			break
		}
		status, out = g.inject(ctx, req)
	default:
		status, out = http.StatusNotFound, map[string]any{"error": "unknown forwarded request " + kind}
	}
	if out == nil { // the caller went away
		status, out = http.StatusServiceUnavailable, map[string]any{"error": "the request was cancelled"}
	}
	b, _ := json.Marshal(out)
	return status, b
}

// inject runs POST /api/v1/inject on this process; a nil body means ctx ended first.
func (g *Gateway) inject(ctx context.Context, req InjectRequest) (int, map[string]any) {
	target, err := g.apiTarget(req.Channel, req.ChatID, req.ThreadID)
	if req.DeliverAs == "" {
		req.DeliverAs = DeliverFollowup
	}
	switch {
	case err != nil:
	case strings.TrimSpace(req.Text) == "":
		err = errors.New(`"text" is required`)
	case req.DeliverAs != DeliverSteer && req.DeliverAs != DeliverFollowup && req.DeliverAs != DeliverNextTurn:
		err = fmt.Errorf(`"deliver_as" %q: use steer, followup or next_turn`, req.DeliverAs)
	case req.Wait != "" && req.Wait != "delivered":
		err = fmt.Errorf(`"wait" %q: use "delivered" or leave it out`, req.Wait)
	}
	if err != nil {
		return http.StatusBadRequest, map[string]any{"error": err.Error()}
	}
	if to := g.movedTo(target.Channel, target.ChatID, target.ThreadID); to != "" {
		// The chat has a new id (a group upgraded): its session and its turns are there,
		// and none comes under the old one to carry the message.
		g.log.Info("an injected message names a chat's old id; it goes to the chat under its new id",
			"channel", target.Channel, "old_chat", target.ChatID, "new_chat", to)
		target.ChatID = to
	}
	in := &injection{req: req, target: target, res: make(chan error, 1)}
	var watch *deliveryWatch
	if req.Wait == "delivered" {
		watch = &deliveryWatch{key: SessionKey(target.Channel, target.ChatID, target.ThreadID), text: req.Text, done: make(chan string, 1)}
		in.armed = watch.arm
		defer watch.stop()
	}
	key := SessionKey(target.Channel, target.ChatID, target.ThreadID)
	shared := g.intake != nil && !channels.IsPinned(g.byName[target.Channel])
	if shared {
		// Cluster mode: stored in the chat's partition before the caller hears it was
		// taken; the process holding the chat (this one, as a rule: see apiInject) takes
		// it from there and decides how it goes in, as control does below.
		done, err := g.publishInject(ctx, in)
		if err != nil {
			g.log.Warn("the shared intake did not take an injected message", "session", key, "err", err)
			return http.StatusServiceUnavailable, map[string]any{"error": "the message could not be stored for the chat; try again: " + err.Error()}
		}
		defer done()
	} else if err := g.control(key, func(s *session) { in.res <- s.inject(in) }); err != nil {
		return http.StatusServiceUnavailable, map[string]any{"error": err.Error()}
	}
	select {
	case err = <-in.res:
	case <-time.After(30 * time.Second): // the actor went away (evicted, shutting down)
		if shared {
			// Stored: whichever process takes the chat's partition runs it.
			if watch == nil {
				return http.StatusAccepted, map[string]any{"status": "queued", "deliver_as": req.DeliverAs}
			}
			return http.StatusGatewayTimeout, map[string]any{"status": "queued", "error": "the message is stored, but this process did not take the chat within 30s; its delivery is not watched"}
		}
		err = errors.New("the chat's session did not take the message")
	case <-ctx.Done():
		return 0, nil
	}
	if err != nil {
		return http.StatusConflict, map[string]any{"error": err.Error()}
	}
	if watch == nil {
		return http.StatusAccepted, map[string]any{"status": "queued", "deliver_as": req.DeliverAs}
	}
	wait := time.NewTimer(g.cfg.TurnTimeout)
	defer wait.Stop()
	select {
	case id := <-watch.done:
		return http.StatusOK, map[string]any{"status": "delivered", "request_id": id}
	case <-wait.C:
		return http.StatusGatewayTimeout, map[string]any{"status": "queued", "error": "no model request carried the message within turn_timeout"}
	case <-ctx.Done():
		return 0, nil
	}
}

// maxWaiters bounds the inject calls of this process waiting for the shared intake to
// hand their message back; past it they are answered 503.
const maxWaiters = 256

// publishInject stores an inject in its chat's partition of the shared intake, named so
// that this process's session, taking it, answers in.res and arms the delivery watch.
// done forgets the name; call it once the call is answered.
func (g *Gateway) publishInject(ctx context.Context, in *injection) (done func(), err error) {
	name := rand.Text()
	g.waitMu.Lock()
	if len(g.waiters) >= maxWaiters {
		g.waitMu.Unlock()
		return nil, errors.New("too many injects are waiting to be taken")
	}
	g.waiters[name] = in
	g.waitMu.Unlock()
	done = func() {
		g.waitMu.Lock()
		delete(g.waiters, name)
		g.waitMu.Unlock()
	}
	t := in.target
	msg := &channels.Message{Channel: t.Channel, ChatID: t.ChatID, ThreadID: t.ThreadID, Injected: true,
		Inject: &channels.Inject{DeliverAs: in.req.DeliverAs, Trigger: in.req.Trigger, Waiter: name},
		Parts:  []channels.Part{channels.TextPart(in.req.Text)}, Time: time.Now()}
	if _, err := g.publish(ctx, msg, ""); err != nil {
		done()
		return nil, err
	}
	return done, nil
}

// waiter takes the inject call of this process that published msg; nil when none waits
// here (another process published it, or the call ended).
func (g *Gateway) waiter(msg *channels.Message) *injection {
	g.waitMu.Lock()
	defer g.waitMu.Unlock()
	in := g.waiters[msg.Inject.Waiter]
	delete(g.waiters, msg.Inject.Waiter)
	return in
}

// injectRefused lets go of an inject of the shared intake its session did not take (the
// chat's queue is full, too many chats): out of the intake, and the waiting call, if
// any, is told why. The chat is not told: nobody there sent it.
func (g *Gateway) injectRefused(msg *channels.Message, in *injection, err error) {
	g.log.Warn("an injected message was not taken", "session", SessionKey(msg.Channel, msg.ChatID, msg.ThreadID), "err", err)
	g.settle(msg.Seq)
	if in != nil {
		select {
		case in.res <- err:
		default:
		}
	}
}

// deliveryWatch learns which provider request carried an injected message: a context event
// of the session whose messages hold the text arms it; the next before_provider_request of
// that session names the request; its after_provider_response completes the watch. A
// session's events of one run come in this order, on one goroutine.
type deliveryWatch struct {
	key, text string
	done      chan string

	mu     sync.Mutex
	armed  bool
	id     string
	unsubs []func()
}

func (w *deliveryWatch) arm(bus *hooks.Bus) {
	const src = "api:inject"
	w.mu.Lock()
	defer w.mu.Unlock()
	w.unsubs = append(w.unsubs,
		bus.On(hooks.NameContext, src, func(ctx context.Context, ev hooks.Event) (any, error) {
			c := ev.(*hooks.Context)
			if c.SessionKey != w.key {
				return nil, nil
			}
			if carries(c.Messages, w.text) {
				w.mu.Lock()
				w.armed = w.id == ""
				w.mu.Unlock()
			}
			return nil, nil
		}),
		bus.On(hooks.NameBeforeProviderRequest, src, func(ctx context.Context, ev hooks.Event) (any, error) {
			b := ev.(*hooks.BeforeProviderRequest)
			w.mu.Lock()
			if b.SessionKey == w.key && w.armed {
				w.id, w.armed = b.RequestID, false
			}
			w.mu.Unlock()
			return nil, nil
		}),
		bus.On(hooks.NameAfterProviderResponse, src, func(ctx context.Context, ev hooks.Event) (any, error) {
			a := ev.(*hooks.AfterProviderResponse)
			w.mu.Lock()
			match := a.SessionKey == w.key && a.RequestID == w.id && w.id != ""
			w.mu.Unlock()
			if match {
				select {
				case w.done <- a.RequestID:
				default:
				}
			}
			return nil, nil
		}),
	)
}

// carries reports whether a request's messages bring text to the model for the first time:
// it is among the user's messages after the model's last answer. The same words earlier
// in the history (said before, or injected before) are not this message.
func carries(msgs []llm.Message, text string) bool {
	for i := len(msgs) - 1; i >= 0 && msgs[i].Role != llm.RoleAssistant; i-- {
		if msgs[i].Role == llm.RoleUser && strings.Contains(msgs[i].Content, text) {
			return true
		}
	}
	return false
}

func (w *deliveryWatch) stop() {
	w.mu.Lock()
	unsubs := w.unsubs
	w.unsubs = nil
	w.mu.Unlock()
	for _, u := range unsubs {
		u()
	}
}

// control runs fn on the session actor of key (created when needed).
func (g *Gateway) control(key string, fn func(*session)) error {
	if g.stopping.Load() {
		return errors.New("the gateway is shutting down")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	s, err := g.sessionLocked(key)
	if err != nil {
		return err
	}
	select {
	case s.ctl <- fn:
		g.wakeLocked(s)
		return nil
	default:
		return errors.New("the chat's queue is full")
	}
}

// inject runs on the actor: it puts an API message into the session per deliver_as.
// Whichever way it goes in, it is journaled like a user's message before the caller hears
// it was taken, and leaves the journal with the answer of the turn that carries it: a
// crash before then neither loses it nor, once that turn was saved, delivers it twice.
func (s *session) inject(in *injection) error {
	g := s.g
	rt, release := g.acquire()
	kept := false
	defer func() {
		if !kept {
			release()
		}
	}()
	t := in.target
	prof := s.profile(rt, t.Channel, t.ChatID, t.ThreadID, "")
	info := hooks.Session{SessionKey: s.key, Channel: t.Channel, ChatID: t.ChatID, ThreadID: t.ThreadID, Profile: prof.Name}
	text := in.req.Text
	arm := func(bus *hooks.Bus) {
		if in.armed != nil {
			in.armed(bus)
		}
	}
	msg := in.msg
	// A steer a process that died had taken is not steered again: the turn it joined is
	// asked again without it, and it comes after as a turn of its own, as after a restart.
	steer := in.req.DeliverAs == DeliverSteer && s.running != nil && s.agent != nil && (msg == nil || !msg.Replayed)
	// Kept for the next turn rather than a turn of its own (see below).
	wait := !steer && !in.req.Trigger && (in.req.DeliverAs == DeliverNextTurn || s.running == nil)
	if (wait || !steer && in.req.DeliverAs == DeliverNextTurn) && len(s.nextTurn) >= maxNextTurn {
		return errors.New("too many messages wait for this chat's next turn")
	}
	if msg == nil {
		msg = &channels.Message{Channel: t.Channel, ChatID: t.ChatID, ThreadID: t.ThreadID, Injected: true, NextTurn: wait,
			Parts: []channels.Part{channels.TextPart(text)}, Time: time.Now()}
		if _, err := g.accept(msg, ""); err != nil {
			return fmt.Errorf("the message could not be journaled: %w", err)
		}
	} else {
		t.Resume = answerResume(msg) // an answer a crash cut is finished in place
	}
	if steer {
		arm(s.agentRT.Bus)
		if s.agent.Steer(text) {
			// It answers with the running turn. Cut by a crash, that turn's message is
			// asked again without it (its attempt is taken back from the history), and this
			// one comes after it as a turn of its own (injected).
			s.running.seqs = append(s.running.seqs, msg.Seq)
			return nil
		}
		// The turn is past its last save point: a turn of its own, journaled as one.
	}
	if wait {
		if in.msg != nil {
			// Cluster mode: the shared intake's partition moves to another process only once
			// what it handed over here was answered; this one waits for a turn that may not
			// come soon, so it does not hold the partition (see startNext).
			g.intake.Park(msg.Seq)
		}
		s.nextTurn = append(s.nextTurn, nextText{text: text, seq: msg.Seq, parked: in.msg != nil})
		arm(rt.Bus)
		return nil
	}
	req := &turnReq{prompt: text, profile: prof, info: info, target: t, rt: rt, release: release}
	if msg.Seq != 0 {
		req.seqs, req.asked = []uint64{msg.Seq}, harness.Attempt{ID: intakeID(msg), Again: msg.Replayed}
	}
	if in.req.DeliverAs == DeliverNextTurn {
		// next_turn with trigger: it goes before the next turn's prompt, and answers with
		// that turn. The turn queued here is that turn when none waits before it; when one
		// does, it takes the text and this one has nothing left to ask (startNext skips it).
		s.nextTurn = append(s.nextTurn, nextText{text: text, seq: msg.Seq})
		req.prompt, req.seqs = "", nil
	}
	arm(rt.Bus)
	kept = true
	s.dispatch(req, QueueFollowup)
	return nil
}

// takeInject takes an inject of cluster mode's shared intake, on the process that answers
// the chat: it goes in as inject decides for one made here, and the API call that
// published it, when it waits on this process, learns the outcome.
func (s *session) takeInject(msg *channels.Message) {
	in := s.g.waiter(msg)
	if in == nil {
		in = &injection{req: InjectRequest{Text: msg.Text(), DeliverAs: msg.Inject.DeliverAs, Trigger: msg.Inject.Trigger},
			target: channels.Target{Channel: msg.Channel, ChatID: msg.ChatID, ThreadID: msg.ThreadID}}
	}
	in.msg = msg
	if err := s.inject(in); err != nil {
		s.g.injectRefused(msg, in, err)
		return
	}
	if in.res != nil {
		select {
		case in.res <- nil:
		default:
		}
	}
}

// injected takes an injected message read back from the journal after a restart: one
// kept for the next turn waits for it again; a turn of its own (or a steer whose turn the
// crash cut) is run again, as a message replayed is.
func (s *session) injected(msg *channels.Message) {
	if msg.Inject != nil {
		s.takeInject(msg)
		return
	}
	if msg.NextTurn {
		s.nextTurn = append(s.nextTurn, nextText{text: msg.Text(), seq: msg.Seq})
		return
	}
	g := s.g
	rt, release := g.acquire()
	prof := s.profile(rt, msg.Channel, msg.ChatID, msg.ThreadID, "")
	info := hooks.Session{SessionKey: s.key, Channel: msg.Channel, ChatID: msg.ChatID, ThreadID: msg.ThreadID, Profile: prof.Name}
	target := channels.Target{Channel: msg.Channel, ChatID: msg.ChatID, ThreadID: msg.ThreadID, Resume: answerResume(msg)}
	s.dispatch(&turnReq{prompt: msg.Text(), profile: prof, info: info, target: target, rt: rt, release: release,
		seqs: []uint64{msg.Seq}, asked: harness.Attempt{ID: intakeID(msg), Again: msg.Replayed}}, QueueFollowup)
}

// maxNextTurn bounds the messages kept for a chat's next turn.
const maxNextTurn = 32

// apiStatus reports channels, sessions with their queues, the loaded hooks and commands, and
// the tools of hooks and of the MCP servers that are up.
func (g *Gateway) apiStatus(w http.ResponseWriter, r *http.Request) {
	rt := g.Runtime()
	// Empty lists are [], not null: a client iterates them without a nil check.
	cmds := []map[string]string{}
	for _, c := range rt.Commands.Commands("") {
		cmds = append(cmds, map[string]string{"name": c.Name, "source": c.Source})
	}
	tools := []map[string]string{}
	for _, t := range rt.Commands.Tools("") {
		tools = append(tools, map[string]string{"name": t.Name, "source": t.Source})
	}
	if rt.MCPTools != nil {
		// The MCP servers' tools that are up, once each, whichever profiles get them.
		seen := map[string]bool{}
		for _, p := range rt.Profiles.Names() {
			for _, t := range rt.MCPTools(p) {
				if name := t.Def().Name; !seen[name] {
					seen[name] = true
					tools = append(tools, map[string]string{"name": name, "source": "mcp"})
				}
			}
		}
	}
	handlers := rt.Bus.Handlers()
	if handlers == nil {
		handlers = []hooks.HandlerInfo{}
	}
	out := map[string]any{
		"ready":    g.notReady(r.Context()) == "",
		"channels": g.connState(),
		"sessions": g.sessionStatus(r.Context()),
		"hooks":    handlers,
		"commands": cmds,
		"tools":    tools,
	}
	if g.cluster != nil {
		out["cluster"] = g.cluster(r.Context())
	}
	writeJSON(w, http.StatusOK, out)
}

// sessionState is one chat in /api/v1/status. Running and Queued are what /status in the
// chat tells (an answer in progress; turns waiting behind it), NextTurn the messages
// injected for its next turn; all three are null when the chat was too busy to tell in
// time (its actor was running a message's receive hooks, say).
type sessionState struct {
	Key      string `json:"key"`
	Mailbox  int    `json:"mailbox"` // messages and admin calls the chat has not taken yet
	Running  *bool  `json:"running"`
	Queued   *int   `json:"queued"`
	NextTurn *int   `json:"next_turn"`
}

// statusWait bounds how long status waits for busy chats to tell their queues.
const statusWait = time.Second

// sessionStatus lists the chats in memory with their queues. The running turn and the
// waiting ones belong to the chat's actor. A parked actor (not active, under g.mu) touches
// none of them until it is woken, which also takes g.mu, so they are read here directly;
// no chat is woken for it, which would put off an idle one's eviction. An actor at work is
// asked on its control queue, between two of its steps.
func (g *Gateway) sessionStatus(ctx context.Context) []sessionState {
	type answer struct {
		i                 int
		running           bool
		queued, nextTurns int
	}
	g.mu.Lock()
	out := make([]sessionState, 0, len(g.sessions))
	answers := make(chan answer, len(g.sessions)) // never blocks an actor
	expect := 0
	for k, s := range g.sessions {
		i := len(out)
		out = append(out, sessionState{Key: k, Mailbox: len(s.mailbox) + len(s.ctl)})
		tell := func(s *session) {
			answers <- answer{i: i, running: s.running != nil, queued: len(s.pending), nextTurns: len(s.nextTurn)}
		}
		if !s.active {
			tell(s)
			expect++
			continue
		}
		select {
		case s.ctl <- tell:
			expect++
		default: // its control queue is full: busy, and left unknown
		}
	}
	g.mu.Unlock()
	timeout := time.NewTimer(statusWait)
	defer timeout.Stop()
collect:
	for ; expect > 0; expect-- {
		select {
		case a := <-answers:
			out[a.i].Running, out[a.i].Queued, out[a.i].NextTurn = &a.running, &a.queued, &a.nextTurns
		case <-timeout.C: // the chats still at work stay unknown
			break collect
		case <-ctx.Done():
			break collect
		}
	}
	slices.SortFunc(out, func(a, b sessionState) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// checkSendPart tells what is wrong with part i of a send, and the status to answer with.
// A media part's Path becomes the absolute, symlink-free path of the file checked, so the
// adapter reads that file and not whatever a link points to by then.
func (g *Gateway) checkSendPart(i int, p *channels.Part) (int, error) {
	switch p.Type {
	case channels.PartText:
		return 0, nil
	case channels.PartAudio, channels.PartImage, channels.PartFile:
	default:
		return http.StatusBadRequest, fmt.Errorf("part %d: unknown type %q (use text, audio, image or file)", i, p.Type)
	}
	if p.Path == "" {
		return http.StatusBadRequest, fmt.Errorf("part %d (%s): media travel by \"path\", a file on the gateway's host", i, p.Type)
	}
	abs, err := filepath.Abs(p.Path)
	if err != nil {
		return http.StatusBadRequest, fmt.Errorf("part %d (%s %s): %v", i, p.Type, p.Path, err)
	}
	what := fmt.Sprintf("part %d (%s %s)", i, p.Type, abs)
	ownState := fmt.Errorf("%s: the gateway does not send its own state; under state_dir it sends only files in state_dir/media", what)
	if g.ownState(abs) { // before looking at the file: a refusal tells nothing about it
		return http.StatusForbidden, ownState
	}
	real, err := filepath.EvalSymlinks(abs)
	if err == nil && g.ownState(real) {
		return http.StatusForbidden, ownState
	}
	var fi os.FileInfo
	if err == nil {
		fi, err = os.Stat(real)
	}
	if err == nil && (!fi.Mode().IsRegular() || kernelFile(real)) {
		return http.StatusBadRequest, fmt.Errorf("%s: not a regular file; the gateway sends only ordinary files", what)
	}
	if err == nil {
		var f *os.File
		if f, err = os.Open(real); err == nil {
			f.Close()
		}
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return http.StatusBadRequest, fmt.Errorf("%s: the file does not exist on the gateway's host", what)
	case errors.Is(err, fs.ErrPermission):
		return http.StatusBadRequest, fmt.Errorf("%s: the gateway may not read the file (permission denied)", what)
	case err != nil:
		return http.StatusBadRequest, fmt.Errorf("%s: the gateway cannot read the file: %v", what, err)
	}
	if p.Name == "" {
		p.Name = filepath.Base(abs) // the name the caller gave, not the link's target
	}
	p.Path = real
	return 0, nil
}

// ownState reports whether path (absolute) is a file of the gateway's own that send must
// never hand out, even to the admin token: it would make the token, which any api: true
// hook holds too, a key to the state database (the intake journal, pairings), every chat's
// history and the adapters' files. Under state_dir only the media store may be sent: the
// files chats shared, which hooks and histories name by path. The session store's folder
// is refused wherever it is.
func (g *Gateway) ownState(path string) bool {
	var refused, allowed []string
	if g.stateDir != "" {
		refused = append(refused, g.stateDir)
	}
	if g.media != nil {
		allowed = append(allowed, g.media.Dir())
	}
	if s, ok := g.store.(interface{ Dir() string }); ok && s.Dir() != "" {
		refused = append(refused, s.Dir())
	}
	under := func(dirs []string) bool {
		for _, d := range dirs {
			for _, d := range resolved(d) {
				if rel, err := filepath.Rel(d, path); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
					return true
				}
			}
		}
		return false
	}
	return under(refused) && !under(allowed)
}

// resolved is dir as written (made absolute) and with its symlinks resolved, when they differ:
// a path the caller wrote may reach the folder either way.
func resolved(dir string) []string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return []string{dir}
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil && real != abs {
		return []string{abs, real}
	}
	return []string{abs}
}

// kernelFile reports whether path is in a kernel pseudo-filesystem, whose files pass for
// regular ones (/proc/self/environ holds the gateway's tokens).
func kernelFile(path string) bool {
	return strings.HasPrefix(path, "/proc/") || strings.HasPrefix(path, "/sys/")
}
