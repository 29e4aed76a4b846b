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

// Settings keep per-chat choices (the /voice mode) across eviction and restarts.
type Settings interface {
	Setting(scope, name string) (string, bool, error)
	SetSetting(scope, name, value string) error
	DeleteSetting(scope, name string) error
}

// journaled is a message as the journal keeps it.
type journaled struct {
	Message *channels.Message `json:"message"`
	// Refs are the parts' platform references (Part.Ref, not on the hook wire), by part
	// index; absent when no part has one.
	Refs []string `json:"refs,omitempty"`
}

// accept journals msg; dup reports a redelivery of a message already accepted.
func (g *Gateway) accept(msg *channels.Message) (dup bool, err error) {
	if g.journal == nil {
		return false, nil
	}
	j := journaled{Message: msg}
	if msg.HasRefs() {
		j.Refs = make([]string, len(msg.Parts))
		for i, p := range msg.Parts {
			j.Refs[i] = p.Ref
		}
	}
	body, err := json.Marshal(j)
	if err != nil {
		return false, err
	}
	key := ""
	if msg.ID != "" {
		key = msg.Channel + "|" + msg.ChatID + "|" + msg.ID
	}
	seq, err := g.journal.Accept(key, body)
	if errors.Is(err, state.ErrDuplicate) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	msg.Seq = seq
	return false, nil
}

// settle removes answered messages from the journal. A failure is logged: the message
// would be answered again after a restart, which is the lesser harm.
func (g *Gateway) settle(seqs ...uint64) {
	if g.journal == nil {
		return
	}
	for _, seq := range seqs {
		if seq == 0 {
			continue
		}
		if err := g.journal.Done(seq); err != nil {
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
		var j journaled
		if err := json.Unmarshal(e.Body, &j); err != nil || j.Message == nil {
			g.log.Error("dropping an unreadable intake journal entry", "seq", e.Seq, "err", err)
			g.settle(e.Seq)
			continue
		}
		m := j.Message
		m.Seq = e.Seq
		for i, ref := range j.Refs {
			if i < len(m.Parts) {
				m.Parts[i].Ref = ref
			}
		}
		if _, ok := g.replay.gates[m.Channel]; !ok {
			g.log.Warn("an unanswered message is for a channel that is not enabled now; dropping it", "channel", m.Channel, "chat", m.ChatID)
			g.settle(e.Seq)
			continue
		}
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
		g.queue(m)
	}
	if gate != nil {
		select {
		case <-gate:
		default:
			close(gate)
		}
	}
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
