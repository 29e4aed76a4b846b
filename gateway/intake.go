package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"sync"

	"gateway/channels"
	"gateway/state"
)

// Journal is the durable intake: a message is written there (fsynced) before Deliver
// returns, so the adapter acknowledges to the platform only what survives a crash; it leaves
// when its answer (or reject, or command reply) reached the chat. state.DB implements it.
type Journal interface {
	// Accept stores body under a dedup key; state.ErrDuplicate for a key already seen.
	Accept(dedupKey string, body []byte) (uint64, error)
	Done(seq uint64) error
	Pending() ([]state.Entry, error)
}

// Placer is a Journal that also keeps where the answer to a journaled message shows while
// it streams (a channel's placement, see channels.Target.Placed), so that an answer cut by
// a crash is finished in its own messages after the restart instead of beside them.
// state.DB implements it; cluster mode's intake does not, and there such an answer comes
// again in new messages.
type Placer interface {
	// Place records the latest placement of the answer to seq; it leaves with Done(seq).
	Place(seq uint64, placement string) error
}

// Settings keep per-chat choices (the /voice mode) across eviction and restarts.
type Settings interface {
	Setting(scope, name string) (string, bool, error)
	SetSetting(scope, name, value string) error
	DeleteSetting(scope, name string) error
}

// SharedIntake is cluster mode's intake, which replaces the Journal: Deliver publishes a
// message to its chat's partition (acknowledging the platform only once it is stored), and
// the message comes back through Take on whichever process holds that partition, which
// answers it and then marks it Done there. cluster.Node implements it.
type SharedIntake interface {
	// Publish stores body durably for the chat sessionKey; dup reports a platform
	// redelivery of a message already stored (dedupKey seen), which is not stored again.
	Publish(ctx context.Context, sessionKey, dedupKey string, body []byte) (dup bool, err error)
	// Done marks a message handed over by Take answered: it is not handed out again.
	Done(seq uint64) error
	// Park says a message handed over by Take waits for its chat's next turn (a next_turn
	// inject): it does not keep its chat's partition from moving to another process, which
	// is then handed it again. Unpark takes it back for the turn that carries it; false
	// means the partition moved meanwhile: the message is the other process's, and this
	// one must leave it out.
	Park(seq uint64)
	Unpark(seq uint64) bool
}

// journaled is a message as the journal keeps it.
type journaled struct {
	Message *channels.Message `json:"message"`
	// Refs are the parts' platform references (Part.Ref, not on the hook wire), by part
	// index; absent when no part has one.
	Refs []string `json:"refs,omitempty"`
}

// durable reports whether an accepted message survives a crash of this process.
func (g *Gateway) durable() bool { return g.journal != nil || g.intake != nil }

// encode is msg as the journal and the shared intake keep it.
func encode(msg *channels.Message) ([]byte, error) {
	j := journaled{Message: msg}
	if msg.HasRefs() {
		j.Refs = make([]string, len(msg.Parts))
		for i, p := range msg.Parts {
			j.Refs[i] = p.Ref
		}
	}
	return json.Marshal(j)
}

// decode reads what encode wrote; seq becomes the message's Seq.
func decode(seq uint64, body []byte) (*channels.Message, error) {
	var j journaled
	if err := json.Unmarshal(body, &j); err != nil {
		return nil, err
	}
	if j.Message == nil {
		return nil, errors.New("no message in the entry")
	}
	m := j.Message
	m.Seq = seq
	for i, ref := range j.Refs {
		if i < len(m.Parts) {
			m.Parts[i].Ref = ref
		}
	}
	return m, nil
}

// accept journals msg; dup reports a redelivery of a message already accepted.
func (g *Gateway) accept(msg *channels.Message, dedupKey string) (dup bool, err error) {
	if g.journal == nil {
		return false, nil
	}
	body, err := encode(msg)
	if err != nil {
		return false, err
	}
	seq, err := g.journal.Accept(dedupKey, body)
	if errors.Is(err, state.ErrDuplicate) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	msg.Seq = seq
	return false, nil
}

// publish stores msg in the shared intake (cluster mode); it is queued when it comes back
// through Take, here or on another process.
func (g *Gateway) publish(ctx context.Context, msg *channels.Message, dedupKey string) (dup bool, err error) {
	body, err := encode(msg)
	if err != nil {
		return false, err
	}
	return g.intake.Publish(ctx, SessionKey(msg.Channel, msg.ChatID, msg.ThreadID), dedupKey, body)
}

// Take queues a message of the shared intake (cluster mode: this process holds its chat's
// partition). seq is the intake's sequence, passed back to SharedIntake.Done once the
// message is answered. An error means it was not taken (the gateway is stopping or not
// started): it must stay in the intake for whichever process holds the partition next.
func (g *Gateway) Take(seq uint64, body []byte, begun bool) error {
	g.stateMu.Lock()
	running := g.started && !g.stopped
	g.stateMu.Unlock()
	if !running || g.stopping.Load() {
		return channels.ErrNotAccepted
	}
	msg, err := decode(seq, body)
	if err != nil {
		g.log.Error("dropping an unreadable message of the shared intake", "seq", seq, "err", err)
		g.settle(seq)
		return nil
	}
	if _, ok := g.byName[msg.Channel]; !ok {
		g.log.Warn("a message is for a channel that is not enabled here; dropping it", "channel", msg.Channel, "chat", msg.ChatID)
		g.settle(seq)
		return nil
	}
	if begun {
		// The chat's previous holder may have answered part of it before it died: its
		// attempt is taken back from the history, and its answer finished in place.
		msg.Replayed = true
		if g.shared != nil {
			if msg.Resume, err = g.shared.resume(msg); err != nil {
				g.log.Warn("cannot read where the answer to a message taken over shows; it comes in new messages", "seq", seq, "err", err)
			}
		}
	}
	if msg.Inject != nil {
		return g.queueInjected(msg)
	}
	if g.metrics != nil {
		g.metrics.MessagesIn.WithLabelValues(msg.Channel).Inc()
	}
	if err := g.queue(msg); err != nil {
		return err // Stop began: it stays in the intake for whoever holds the chat next
	}
	return nil
}

// queueInjected puts an inject of the shared intake on its chat's mailbox, behind the
// chat's messages stored before it (the partition's order); its session decides how it
// goes in (takeInject). One that finds no room is let go as the session would refuse it.
func (g *Gateway) queueInjected(msg *channels.Message) error {
	queued, err := g.enqueue(SessionKey(msg.Channel, msg.ChatID, msg.ThreadID), msg)
	if errors.Is(err, channels.ErrStopping) {
		return err // it stays in the intake for whoever holds the chat next
	}
	if err == nil && !queued {
		err = errors.New("the chat's queue is full")
	}
	if err != nil {
		g.injectRefused(msg, g.waiter(msg), err)
	}
	return nil
}

// Forget lets go of the idle chat sessions whose key matches: in cluster mode, the chats of
// a partition another process answered meanwhile, whose history and settings this process
// must read afresh. A session that is busy is left alone.
func (g *Gateway) Forget(match func(sessionKey string) bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for key, s := range g.sessions {
		if match(key) && s.idle {
			g.dropSessionLocked(s)
		}
	}
}

// placed is where a turn's stream reports its placement: kept with the first message the
// turn answers, which is the one a restart answers first, in the journal or, in cluster
// mode, in the shared settings. nil when none is kept or the turn answers nothing
// journaled.
func (g *Gateway) placed(sessionKey string, req *turnReq) func(string) {
	if len(req.seqs) == 0 {
		return nil
	}
	return g.placer(sessionKey, req.seqs[0], req.asked.ID)
}

// placer keeps placements for the message seq (intake is its intakeID), as placed does.
func (g *Gateway) placer(sessionKey string, seq uint64, intake string) func(string) {
	if seq == 0 {
		return nil
	}
	var keep func(string) error
	if p, ok := g.journal.(Placer); ok {
		keep = func(placement string) error { return p.Place(seq, placement) }
	} else if g.shared != nil && intake != "" {
		keep = func(placement string) error { return g.shared.place(seq, sessionKey, intake, placement) }
	} else {
		return nil
	}
	return func(placement string) {
		if err := keep(placement); err != nil {
			g.log.Warn("cannot keep where an answer shows; after a crash it would come again in new messages", "seq", seq, "err", err)
			return
		}
		g.log.Debug("answer placement kept", "seq", seq, "placement", placement)
	}
}

// settle marks answered messages done: out of the journal, or of the shared intake. A
// failure is logged: the message would be answered again after a restart, which is the
// lesser harm.
func (g *Gateway) settle(seqs ...uint64) {
	if g.journal == nil && g.intake == nil {
		return
	}
	for _, seq := range seqs {
		if seq == 0 {
			continue
		}
		var err error
		if g.intake != nil {
			err = g.intake.Done(seq)
			if g.shared != nil {
				if perr := g.shared.done(seq); perr != nil {
					g.log.Warn("cannot forget where an answered message's answer shows", "seq", seq, "err", perr)
				}
			}
		} else {
			err = g.journal.Done(seq)
		}
		if err != nil {
			g.log.Error("cannot mark a message answered in the intake journal", "seq", seq, "err", err)
			continue
		}
		g.log.Debug("message settled: out of the intake journal", "seq", seq)
	}
}

// replay is what the journal held at start, by channel: messages accepted before a crash
// or restart and not answered. Each channel's are queued right after the channel connected
// and before any new message of it is taken (Deliver waits for its channel's gate), so a
// chat's old messages are answered first, in order.
type replay struct {
	mu    sync.Mutex
	byCh  map[string][]*channels.Message
	gates map[string]chan struct{}
}

// loadReplay reads the journal at Start. Entries that cannot be read are logged and dropped.
func (g *Gateway) loadReplay() {
	g.replay = &replay{byCh: map[string][]*channels.Message{}, gates: map[string]chan struct{}{}}
	for _, ch := range g.channels {
		g.replay.gates[ch.Name()] = make(chan struct{})
	}
	if g.journal == nil {
		return
	}
	entries, err := g.journal.Pending()
	if err != nil {
		g.log.Error("cannot read the intake journal; unanswered messages from before the restart are not answered", "err", err)
		return
	}
	for _, e := range entries {
		m, err := decode(e.Seq, e.Body)
		if err != nil {
			g.log.Error("dropping an unreadable intake journal entry", "seq", e.Seq, "err", err)
			g.settle(e.Seq)
			continue
		}
		if _, ok := g.replay.gates[m.Channel]; !ok {
			g.log.Warn("an unanswered message is for a channel that is not enabled now; dropping it", "channel", m.Channel, "chat", m.ChatID)
			g.settle(e.Seq)
			continue
		}
		m.Resume, m.Replayed = e.Place, true
		g.replay.byCh[m.Channel] = append(g.replay.byCh[m.Channel], m)
	}
	if n := len(entries); n > 0 {
		g.log.Info("answering messages accepted before the restart", "messages", n)
	}
}

// openGate queues channel's journaled messages and lets its new messages in.
func (g *Gateway) openGate(channel string) {
	r := g.replay
	r.mu.Lock()
	msgs := r.byCh[channel]
	delete(r.byCh, channel)
	gate := r.gates[channel]
	r.mu.Unlock()
	for _, m := range msgs {
		if m.ID != "" {
			g.dedup.Seen(m.Channel + "|" + m.ChatID + "|" + m.ID)
		}
		_ = g.queueReplayed(m) // refused only when Stop began: then it stays journaled
	}
	if gate != nil {
		select {
		case <-gate:
		default:
			close(gate)
		}
	}
}

// queueReplayed puts a message journaled before the restart on its chat's session. Unlike
// queue, the chat's queue_size does not turn it away: the message was taken before the
// restart (a running turn and a full queue are one more than the queue holds), and
// refusing it now would drop what the platform was told was kept.
func (g *Gateway) queueReplayed(msg *channels.Message) error {
	if to := g.movedTo(msg.Channel, msg.ChatID, msg.ThreadID); to != "" {
		// Kept for the chat before its id changed (a message waiting for its next turn):
		// the chat is answered under its new id, and no turn comes for the old one.
		g.log.Info("a message kept for a chat whose id changed goes to it under the new id",
			"channel", msg.Channel, "old_chat", msg.ChatID, "new_chat", to, "seq", msg.Seq)
		// An answer cut by the crash showed in the old chat: it comes again in new messages.
		msg.ChatID, msg.Resume = to, ""
	}
	key := SessionKey(msg.Channel, msg.ChatID, msg.ThreadID)
	g.mu.Lock()
	s, err := g.sessionLocked(key)
	if err != nil || g.stopping.Load() {
		g.mu.Unlock()
		return g.queue(msg) // too many chats, or stopping: as any message
	}
	s.replayed = append(s.replayed, msg)
	s.replaying.Add(1)
	g.wakeLocked(s)
	g.mu.Unlock()
	return nil
}

// waitGate holds a new message of channel until its journaled messages are queued.
func (g *Gateway) waitGate(ctx context.Context, channel string) error {
	r := g.replay
	if r == nil {
		return nil
	}
	r.mu.Lock()
	gate := r.gates[channel]
	r.mu.Unlock()
	if gate == nil {
		return nil
	}
	select {
	case <-gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
