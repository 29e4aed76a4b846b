package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"gateway/channels/telegram/telegramtest"
)

// firstChat is the id of the first benchmark chat; chats are private (positive ids), so
// that production pacing applies its per-chat limit of one send a second.
const firstChat = 10_001

// maxBad bounds the unexpected answers kept for the report.
const maxBad = 5

// tracker sees the fake's sends and matches them with the messages awaiting an answer.
// Its chat map is built before the fake starts and only read afterwards.
type tracker struct {
	chats map[int64]*chatState

	mu      sync.Mutex
	samples []sample
	bad     []string
	left    int           // answers still awaited in this round
	allDone chan struct{} // closed when left reaches 0
}

type chatState struct {
	id    int64
	mu    sync.Mutex
	queue []awaited     // in the order sent; a chat answers in order (queue mode followup)
	done  chan struct{} // one signal per answer, for the closed-loop user
}

type awaited struct {
	tag  string // the message text, which is also the answer the model gives
	sent time.Time
}

// sample is one message's fate.
type sample struct {
	latency time.Duration
	ok      bool
}

func newTracker(chats int) *tracker {
	t := &tracker{chats: make(map[int64]*chatState, chats)}
	for i := range chats {
		id := int64(firstChat + i)
		t.chats[id] = &chatState{id: id, done: make(chan struct{}, 1)}
	}
	return t
}

// onSent is the fake's OnSent: a message whose text is the oldest awaited answer completes
// it; a partial preview of it does not; anything else (an error notice, "still working")
// fails it.
func (t *tracker) onSent(m telegramtest.Message) {
	st := t.chats[m.ChatID]
	if st == nil {
		return
	}
	now := time.Now()
	st.mu.Lock()
	if len(st.queue) == 0 {
		st.mu.Unlock()
		return
	}
	head := st.queue[0]
	ok := m.Text == head.tag
	if !ok && strings.HasPrefix(head.tag, m.Text) {
		st.mu.Unlock()
		return // a streaming preview
	}
	st.queue = st.queue[1:]
	st.mu.Unlock()

	t.mu.Lock()
	t.samples = append(t.samples, sample{latency: now.Sub(head.sent), ok: ok})
	if !ok && len(t.bad) < maxBad {
		t.bad = append(t.bad, fmt.Sprintf("chat %d, to %q: %q", st.id, head.tag, m.Text))
	}
	t.left--
	if t.left == 0 {
		close(t.allDone)
	}
	t.mu.Unlock()
	select {
	case st.done <- struct{}{}:
	default: // open loop: nobody waits per chat
	}
}

// round prepares for n answers and returns what the previous round collected.
func (t *tracker) round(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.samples = make([]sample, 0, n)
	t.bad = nil
	t.left = n
	t.allDone = make(chan struct{})
}

func (t *tracker) results() ([]sample, []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.samples), slices.Clone(t.bad)
}

// send injects the user's message tag into chat st.
func (t *tracker) send(srv *telegramtest.Server, st *chatState, tag string) {
	st.mu.Lock()
	st.queue = append(st.queue, awaited{tag: tag, sent: time.Now()})
	st.mu.Unlock()
	srv.Send(telegramtest.Update{ChatID: st.id, Text: tag})
}

// drive sends counts[i] messages to chat i, tagged with numbers from first, and waits for
// every answer. With rate 0 it plays one user per chat who sends the next message when the
// previous answer arrived (a closed loop: the gateway is kept as busy as the chats can
// make it, and latency grows with the queue that makes). With rate > 0 messages go out
// at that many per second in all, round-robin over the chats, whatever the answers do (an
// open loop: latency at a given load). It returns ctx's error when the run went past its
// deadline, with what was measured so far.
func (t *tracker) drive(ctx context.Context, srv *telegramtest.Server, counts []int, first int, rate float64) ([]sample, []string, error) {
	total := 0
	for _, n := range counts {
		total += n
	}
	t.round(total)
	t.mu.Lock()
	allDone := t.allDone
	t.mu.Unlock()

	var wg sync.WaitGroup
	if rate <= 0 {
		for i, n := range counts {
			st := t.chats[int64(firstChat+i)]
			wg.Go(func() {
				for j := range n {
					t.send(srv, st, fmt.Sprintf("msg-%d-%d", st.id, first+j))
					select {
					case <-st.done:
					case <-ctx.Done():
						return
					}
				}
			})
		}
	} else {
		wg.Go(func() {
			start := time.Now()
			sent := make([]int, len(counts))
			for i := 0; i < total; {
				for c := range counts {
					if sent[c] >= counts[c] {
						continue
					}
					at := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
					if d := time.Until(at); d > 0 {
						select {
						case <-time.After(d):
						case <-ctx.Done():
							return
						}
					}
					t.send(srv, t.chats[int64(firstChat+c)], fmt.Sprintf("msg-%d-%d", firstChat+c, first+sent[c]))
					sent[c]++
					i++
				}
			}
		})
	}
	wg.Wait()
	var err error
	select {
	case <-allDone:
	case <-ctx.Done():
		err = ctx.Err()
	}
	samples, bad := t.results()
	return samples, bad, err
}

// spread splits n messages over chats as evenly as possible.
func spread(n, chats int) []int {
	out := make([]int, chats)
	for i := range out {
		out[i] = n / chats
		if i < n%chats {
			out[i]++
		}
	}
	return out
}

// percentiles of the latencies of the answered samples.
type percentiles struct{ P50, P90, P99, Max time.Duration }

func latencies(samples []sample) (p percentiles, answered, failed int) {
	lat := make([]time.Duration, 0, len(samples))
	for _, s := range samples {
		if s.ok {
			lat = append(lat, s.latency)
		} else {
			failed++
		}
	}
	if len(lat) == 0 {
		return p, 0, failed
	}
	slices.Sort(lat)
	at := func(q float64) time.Duration {
		i := int(q*float64(len(lat))+0.5) - 1
		return lat[min(max(i, 0), len(lat)-1)]
	}
	return percentiles{P50: at(0.50), P90: at(0.90), P99: at(0.99), Max: lat[len(lat)-1]}, len(lat), failed
}
