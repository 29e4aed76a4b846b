package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Delivery is one message of a partition, handed to the handler in stream order. Ack it
// once it was answered: it then leaves the stream. An unacked message is delivered again
// to whichever process holds the partition next.
type Delivery struct {
	Partition int
	Seq       uint64
	Body      []byte
	// Backlog says the message was in the partition before this process took it: its
	// previous holder may have begun answering it (and died before its ack).
	Backlog bool
	msg     jetstream.Msg
	done    func()
	hold    *holding
}

// holding is whether a delivered message holds its partition here: it does from its
// delivery until its ack, except while parked.
type holding struct {
	mu     sync.Mutex
	parked bool
	acked  bool
	w      *partitionWorker
}

// Park says the message waits here for something that may not come soon (a chat's next
// turn): it no longer keeps its partition from being handed over. Handed over, the
// partition's next holder is delivered it again, unacked.
func (d Delivery) Park() {
	h := d.hold
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.parked && !h.acked {
		h.parked = true
		h.w.outstanding.Add(-1)
	}
}

// Parked reports whether the message is parked.
func (d Delivery) Parked() bool {
	d.hold.mu.Lock()
	defer d.hold.mu.Unlock()
	return d.hold.parked
}

// Unpark takes a parked message back for its answer, which it then holds the partition
// for; false means the partition is being handed over or was: its next holder answers it,
// and this process must let it go.
func (d Delivery) Unpark() bool {
	h := d.hold
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.parked {
		return !h.acked
	}
	// Counted before stopped is read: balance, which sets stopped before it reads
	// outstanding, then either sees it or is seen.
	h.w.outstanding.Add(1)
	if h.w.stopped.Load() {
		h.w.outstanding.Add(-1)
		return false
	}
	h.parked = false
	return true
}

// Ack marks the message answered.
func (d Delivery) Ack(ctx context.Context) error {
	err := d.msg.DoubleAck(ctx)
	if err == nil && d.done != nil {
		d.done()
	}
	return err
}

// Consumer holds a fair share of the intake's partitions through leases and delivers each
// held partition's messages to a handler, in order. A process that stops renewing (it
// died, or lost NATS) loses its partitions TTL later to the others, which deliver what it
// had not acked, from the oldest.
type Consumer struct {
	in      *Intake
	leases  *Leases
	holder  string
	handle  func(Delivery)
	opts    ConsumerOptions
	log     *slog.Logger
	paused  atomic.Bool
	renewed time.Time // the last renewal of the leases; Run's goroutine only

	mu   sync.Mutex
	held map[int]*partitionWorker
}

// ConsumerOptions are a Consumer's optional parts.
type ConsumerOptions struct {
	// OnTake is called when a partition is taken, before its first message is handed
	// over: what this process remembers of its chats may be stale (another answered them).
	OnTake func(partition int)
	// Wait, when set, is called before each message is handed over and blocks while what
	// the answer needs is down (Postgres); it returns an error only when ctx ended.
	Wait func(ctx context.Context) error
	Log  *slog.Logger
}

// NewConsumer prepares a consumer for holder (unique per process start). handle is called
// from one goroutine per partition and must not block long: it hands the message over.
func NewConsumer(in *Intake, leases *Leases, holder string, handle func(Delivery), log *slog.Logger) *Consumer {
	return NewConsumerWith(in, leases, holder, handle, ConsumerOptions{Log: log})
}

// NewConsumerWith is NewConsumer with options.
func NewConsumerWith(in *Intake, leases *Leases, holder string, handle func(Delivery), opts ConsumerOptions) *Consumer {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Consumer{in: in, leases: leases, holder: holder, handle: handle, opts: opts, log: log, held: map[int]*partitionWorker{}}
}

// Held lists the partitions held now.
func (c *Consumer) Held() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]int, 0, len(c.held))
	for p := range c.in.cfg.Partitions {
		if c.held[p] != nil {
			out = append(out, p)
		}
	}
	return out
}

// PartitionStatus is one held partition, for status pages and metrics.
type PartitionStatus struct {
	Partition int   `json:"partition"`
	Lag       int64 `json:"lag"`       // stored and not yet handed over here
	InFlight  int64 `json:"in_flight"` // handed over, not answered yet
	// HandingOver: this process takes no more of its messages and gives it up once those
	// it was handed are answered (another process joined).
	HandingOver bool `json:"handing_over,omitempty"`
}

// Status lists the held partitions with their lag (as of the last renewal, every TTL/4).
func (c *Consumer) Status() []PartitionStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]PartitionStatus, 0, len(c.held))
	for p := range c.in.cfg.Partitions {
		if w := c.held[p]; w != nil {
			out = append(out, PartitionStatus{Partition: p, Lag: w.lag.Load(), InFlight: w.outstanding.Load(), HandingOver: w.stopped.Load()})
		}
	}
	return out
}

// Pause stops handing over messages and taking partitions; the leases are kept (renewed)
// until Run ends, so that what was handed over can still be answered and acked here before
// another process takes the partitions. Call it first when shutting down.
func (c *Consumer) Pause() {
	c.paused.Store(true)
	c.mu.Lock()
	held := make([]*partitionWorker, 0, len(c.held))
	for _, w := range c.held {
		held = append(held, w)
	}
	c.mu.Unlock()
	for _, w := range held {
		w.stop()
	}
}

// Run balances and consumes until ctx ends, then stops delivering and gives its
// partitions up: what was delivered and not acked goes to the next holder, so end Run
// after the gateway has finished (or abandoned) the turns it was handed. It returns early
// with an error only when it cannot join at all.
func (c *Consumer) Run(ctx context.Context) error {
	member, err := c.leases.Acquire(ctx, "member."+c.holder, c.holder)
	if err != nil {
		return fmt.Errorf("cluster: cannot join the intake as %s: %w", c.holder, err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		c.mu.Lock()
		held := c.held
		c.held = map[int]*partitionWorker{}
		c.mu.Unlock()
		for _, w := range held {
			w.stop()
			_ = w.lease.Release(rctx)
		}
		_ = member.Release(rctx)
	}()
	// Balancing often keeps a hand-over short (a released partition waits for the next
	// tick of another process); renewing needs only TTL/4.
	tick := time.NewTicker(min(c.leases.TTL()/4, time.Second))
	defer tick.Stop()
	for {
		// Balancing runs every tick; renewing the leases (and reading the lag) every TTL/4.
		renew := time.Since(c.renewed) >= c.leases.TTL()/4
		if renew {
			c.renewed = time.Now()
			if err := member.Renew(ctx); errors.Is(err, ErrLeaseLost) {
				if member, err = c.leases.Acquire(ctx, "member."+c.holder, c.holder); err != nil {
					c.log.Warn("intake: cannot rejoin", "err", err)
				}
			}
		}
		c.balance(ctx, renew)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// balance renews what is held (when renew), drops what was lost, gives up what is above the fair share
// (after its delivered messages were acked) and takes free partitions up to it.
func (c *Consumer) balance(ctx context.Context, renew bool) {
	c.mu.Lock()
	held := maps.Clone(c.held)
	c.mu.Unlock()
	for p, w := range held {
		if !renew {
			break
		}
		if err := w.lease.Renew(ctx); err != nil {
			if errors.Is(err, ErrLeaseLost) {
				// Expired without anyone taking it (NATS was away longer than TTL): take it
				// again at once, before another process does, so its messages stay here.
				if lease, aerr := c.leases.Acquire(ctx, w.lease.Name(), c.holder); aerr == nil {
					w.lease = lease
					continue
				}
				c.log.Warn("intake: lost a partition", "partition", p)
				w.stop()
				c.drop(p)
				delete(held, p)
			}
			continue
		}
		if !w.stopped.Load() {
			if info, err := w.cons.Info(ctx); err == nil {
				w.lag.Store(int64(info.NumPending))
			}
		}
	}
	members, err := c.leases.Count(ctx, "member.")
	if err != nil || members == 0 {
		return
	}
	parts := c.in.cfg.Partitions
	share := (parts + members - 1) / members
	// Hand over what is above the share: stop taking its messages now, and release it at a
	// later turn, once every message it was handed has been acked (answered), so that the
	// next holder is not handed a message that is still being answered here. Meanwhile the
	// lease is renewed like the others.
	active := 0
	for p, w := range held {
		if w.stopped.Load() {
			if w.outstanding.Load() == 0 {
				_ = w.lease.Release(ctx)
				c.drop(p)
				delete(held, p)
			}
			continue
		}
		active++
	}
	for _, w := range held {
		if active <= share {
			break
		}
		if !w.stopped.Load() {
			w.stop()
			active--
		}
	}
	if c.paused.Load() {
		return
	}
	for p := 0; p < parts && len(held) < share; p++ {
		if held[p] != nil {
			continue
		}
		lease, err := c.leases.Acquire(ctx, "intake."+strconv.Itoa(p), c.holder)
		if err != nil {
			continue
		}
		if c.opts.OnTake != nil {
			c.opts.OnTake(p)
		}
		w, err := c.start(ctx, p, lease)
		if err != nil {
			c.log.Error("intake: cannot consume a partition", "partition", p, "err", err)
			_ = lease.Release(ctx)
			continue
		}
		held[p] = w
		c.mu.Lock()
		c.held[p] = w
		c.mu.Unlock()
	}
}

func (c *Consumer) drop(p int) {
	c.mu.Lock()
	delete(c.held, p)
	c.mu.Unlock()
}

type partitionWorker struct {
	lease       *Lease
	cons        jetstream.Consumer
	iter        jetstream.MessagesContext
	lag         atomic.Int64 // the consumer's pending count at the last renewal
	wg          sync.WaitGroup
	outstanding atomic.Int64 // handed to the handler, not acked yet
	stopped     atomic.Bool  // handed over: no more deliveries
	once        sync.Once
	cancel      context.CancelFunc // ends a Wait and the reconnect pause
}

// start consumes partition p from its oldest unacked message: the consumer is made anew,
// so what a previous holder was given and did not ack comes first, in stream order (the
// stream is a work queue: acked messages are gone).
func (c *Consumer) start(ctx context.Context, p int, lease *Lease) (*partitionWorker, error) {
	js, name := c.in.js, "intake-"+strconv.Itoa(p)
	if err := js.DeleteConsumer(ctx, c.in.cfg.Stream, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, err
	}
	cons, err := js.CreateConsumer(ctx, c.in.cfg.Stream, jetstream.ConsumerConfig{
		Durable:       name,
		FilterSubject: c.in.Subject(p),
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		// Not redelivered while this holder lives: a long turn is not a lost message.
		AckWait:    24 * time.Hour,
		MaxDeliver: -1,
	})
	if err != nil {
		return nil, err
	}
	iter, err := cons.Messages()
	if err != nil {
		return nil, err
	}
	// The consumer is new and delivers in stream order: its first NumPending messages are
	// the ones stored before it was made.
	backlog := cons.CachedInfo().NumPending
	w := &partitionWorker{lease: lease, cons: cons, iter: iter}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w.cancel = cancel
	w.wg.Go(func() {
		for {
			m, err := iter.Next()
			if err != nil {
				if errors.Is(err, jetstream.ErrMsgIteratorClosed) || errors.Is(err, nats.ErrConnectionClosed) {
					return
				}
				select { // a dropped connection: the client reconnects
				case <-wctx.Done():
					return
				case <-time.After(100 * time.Millisecond):
				}
				continue
			}
			if c.opts.Wait != nil && c.opts.Wait(wctx) != nil {
				return // stopped while waiting: the message goes to the next holder, unacked
			}
			meta, _ := m.Metadata()
			var seq uint64
			if meta != nil {
				seq = meta.Sequence.Stream
			}
			w.outstanding.Add(1)
			h := &holding{w: w}
			old := backlog > 0
			if old {
				backlog--
			}
			c.handle(Delivery{Partition: p, Seq: seq, Body: m.Data(), Backlog: old, msg: m, hold: h, done: func() {
				h.mu.Lock()
				defer h.mu.Unlock()
				if !h.acked && !h.parked {
					w.outstanding.Add(-1)
				}
				h.acked = true
			}})
		}
	})
	return w, nil
}

// stop ends delivery; the handler is not called again for this partition.
func (w *partitionWorker) stop() {
	w.once.Do(func() { w.stopped.Store(true); w.cancel(); w.iter.Stop() })
	w.wg.Wait()
}
