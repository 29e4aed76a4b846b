package gateway

import (
	"fmt"
	"sync"

	"gateway/channels"
)

// sharedPlaces keeps, in cluster mode, where the answer to a message of the shared intake
// shows while it streams (channels.Target.Placed), so that the process that takes the
// chat after its holder died finishes that answer in its own messages instead of posting
// it again beside the cut one. The single-node journal keeps placements itself (Placer);
// the shared intake (NATS) cannot, so they go to the shared settings (Postgres), under
// the chat's key and the message's intake id: a sequence number alone could come back
// after the stream is made anew.
type sharedPlaces struct {
	st Settings
	mu sync.Mutex
	// kept are the placements this process wrote or read, by intake seq, deleted once
	// their message is answered; only messages in hand are here.
	kept map[uint64]placeKey
}

type placeKey struct{ scope, name string }

func newSharedPlaces(st Settings) *sharedPlaces {
	return &sharedPlaces{st: st, kept: map[uint64]placeKey{}}
}

// noticesShown is the placement kept for a message whose notices (what its receive hooks
// could not use, the transcript's echo) reached the chat before any of its answer did: the
// answer to it after a crash comes without them, as it would after a placement of the
// answer's own. No channel's placement reads like it.
const noticesShown = "notices shown"

// answerResume is the placement of an earlier attempt at the answer to msg, which the
// answer finishes; "" when none of it showed.
func answerResume(msg *channels.Message) string {
	if msg.Resume == noticesShown {
		return ""
	}
	return msg.Resume
}

// intakeID names a message of the journal or the shared intake in the chat's history
// (harness.Attempt.ID): the seq beside the platform's id, since a state file started
// afresh, or a stream made anew, counts seqs from 1 again.
func intakeID(msg *channels.Message) string { return fmt.Sprintf("%d:%s", msg.Seq, msg.ID) }

func placeKeyOf(sessionKey, intake string) placeKey {
	return placeKey{scope: sessionKey, name: "placement:" + intake}
}

// place records the latest placement of the answer to the message seq.
func (p *sharedPlaces) place(seq uint64, sessionKey, intake, placement string) error {
	k := placeKeyOf(sessionKey, intake)
	p.mu.Lock()
	p.kept[seq] = k
	p.mu.Unlock()
	return p.st.SetSetting(k.scope, k.name, placement)
}

// resume is the placement the chat's previous holder kept for msg, "" for none.
func (p *sharedPlaces) resume(msg *channels.Message) (string, error) {
	k := placeKeyOf(SessionKey(msg.Channel, msg.ChatID, msg.ThreadID), intakeID(msg))
	v, ok, err := p.st.Setting(k.scope, k.name)
	if err != nil || !ok {
		return "", err
	}
	p.mu.Lock()
	p.kept[msg.Seq] = k
	p.mu.Unlock()
	return v, nil
}

// done forgets the placement of an answered message.
func (p *sharedPlaces) done(seq uint64) error {
	p.mu.Lock()
	k, ok := p.kept[seq]
	delete(p.kept, seq)
	p.mu.Unlock()
	if !ok {
		return nil
	}
	return p.st.DeleteSetting(k.scope, k.name)
}
