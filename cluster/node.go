package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// Node is this process's part in a cluster: it publishes accepted messages to the intake
// stream (the gateway's SharedIntake), consumes the partitions it holds and hands their
// messages to the gateway, acks them once answered, and tells whether NATS and Postgres
// are reachable.
type Node struct {
	pg     *Postgres
	nc     *nats.Conn
	url    string
	intake *Intake
	leases *Leases
	holder string
	log    *slog.Logger
	cons   *Consumer

	mu       sync.Mutex
	inflight map[uint64]Delivery // handed to the gateway, not answered yet
	retry    map[uint64]*ackRetry

	healthMu   sync.Mutex
	healthAt   time.Time
	healthErr  error
	healthWait time.Duration
}

type ackRetry struct {
	d     Delivery
	tries int
}

// NodeOptions shape a Node; the zero value is what production uses.
type NodeOptions struct {
	Log *slog.Logger
	// LeaseTTL is how long a dead process keeps its partitions and connections (default
	// 10 s: a Telegram polling lease moves to a survivor within 15 s).
	LeaseTTL time.Duration
	Intake   IntakeConfig
}

// DefaultLeaseTTL is how long a dead process's partitions and connections stay blocked.
const DefaultLeaseTTL = 10 * time.Second

// ackAttempts bounds the retries of an ack that did not go through (about one a second):
// past them the message is answered again by the partition's next holder, if any.
const ackAttempts = 120

// OpenNode connects to NATS at the config's URL (reconnecting for as long as the process
// runs), and opens the intake stream and the lease bucket. pg is the cluster's Postgres.
func OpenNode(ctx context.Context, cfg Config, pg *Postgres, opts NodeOptions) (*Node, error) {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ttl := opts.LeaseTTL
	if ttl <= 0 {
		ttl = DefaultLeaseTTL
	}
	url := cfg.NATSURL.Reveal()
	n := &Node{pg: pg, url: url, holder: holderName(), log: log.With("component", "cluster"),
		inflight: map[uint64]Delivery{}, retry: map[uint64]*ackRetry{}, healthWait: time.Second}
	nc, err := nats.Connect(url,
		nats.Name("gateway "+n.holder),
		nats.Timeout(5*time.Second),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(500*time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				n.log.Warn("NATS connection lost; reconnecting (not ready meanwhile)", "nats", Redact(url), "err", scrub(err, url))
			}
		}),
		nats.ReconnectHandler(func(*nats.Conn) { n.log.Info("NATS connection back", "nats", Redact(url)) }),
	)
	if err != nil {
		return nil, CheckNATS(ctx, url) // the plain-words reason
	}
	n.nc = nc
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("cluster: nats: %w", scrub(err, url))
	}
	if n.intake, err = OpenIntake(ctx, js, opts.Intake); err != nil {
		nc.Close()
		return nil, err
	}
	if n.leases, err = OpenLeases(ctx, js, "GATEWAY_LEASES", ttl); err != nil {
		nc.Close()
		return nil, err
	}
	return n, nil
}

// holderName names this process start: host, pid and start time, as a lease key allows.
func holderName() string {
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, host)
	if host == "" {
		host = "host"
	}
	return host + "-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixMilli()%1e9, 36)
}

// Holder is this process's name in the leases.
func (n *Node) Holder() string { return n.holder }

// Leases are the cluster's leases (partitions, members, connections).
func (n *Node) Leases() *Leases { return n.leases }

// Publish implements the gateway's SharedIntake: the message is stored in its chat's
// partition before it returns. A platform redelivery is caught twice over: within
// minutes by JetStream (the same Nats-Msg-Id), and for the dedup window by Postgres.
func (n *Node) Publish(ctx context.Context, sessionKey, dedupKey string, body []byte) (bool, error) {
	if n.nc.Status() != nats.CONNECTED {
		return false, fmt.Errorf("cluster: NATS at %s is unreachable", Redact(n.url))
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if dedupKey != "" {
		// Postgres away: the message is still stored (nothing is lost); only a redelivery
		// later than JetStream's window could then be answered twice.
		if seen, err := n.pg.dedupSeen(ctx, dedupKey); err != nil {
			n.log.Warn("cannot check the dedup window; taking the message", "err", err)
		} else if seen {
			return true, nil
		}
	}
	_, dup, err := n.intake.Publish(ctx, sessionKey, dedupKey, body)
	if err != nil {
		return false, scrub(err, n.url)
	}
	if dedupKey != "" && !dup {
		if err := n.pg.dedupRecord(ctx, dedupKey); err != nil {
			n.log.Warn("cannot record a message id in the dedup window", "err", err)
		}
	}
	return dup, nil
}

// Done implements the gateway's SharedIntake: the message was answered, so it is acked
// and leaves the stream. An ack that does not go through (NATS away) is retried.
func (n *Node) Done(seq uint64) error {
	n.mu.Lock()
	d, ok := n.inflight[seq]
	delete(n.inflight, seq)
	n.mu.Unlock()
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := d.Ack(ctx); err != nil {
		n.log.Warn("cannot ack an answered message; retrying", "seq", seq, "err", scrub(err, n.url))
		n.mu.Lock()
		n.retry[seq] = &ackRetry{d: d}
		n.mu.Unlock()
	}
	return nil
}

// Park implements the gateway's SharedIntake: the message seq, handed over by Take, waits
// here for its chat's next turn, and does not keep its partition from being handed over
// meanwhile (it is then delivered again to the partition's next holder).
func (n *Node) Park(seq uint64) {
	n.mu.Lock()
	d, ok := n.inflight[seq]
	n.mu.Unlock()
	if ok {
		d.Park()
	}
}

// Unpark implements the gateway's SharedIntake: it takes a parked message back for the
// turn that answers it; false means its partition was handed over (or is being) since: the
// message is the next holder's, and is let go here.
func (n *Node) Unpark(seq uint64) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	d, ok := n.inflight[seq]
	if ok && d.Unpark() {
		return true
	}
	delete(n.inflight, seq)
	return false
}

// Run consumes the partitions this process holds until ctx ends: each message goes to
// take (the gateway's Take); forget is told of each partition taken, whose chats another
// process may have answered meanwhile. End ctx only after Pause and the gateway's Stop:
// Run then gives up the partitions, and their unanswered messages go to the others.
func (n *Node) Run(ctx context.Context, take func(seq uint64, body []byte, backlog bool) error, forget func(partition int), forwarded Forwarded) error {
	if forwarded != nil {
		stop, err := n.serveForwarded(ctx, forwarded)
		if err != nil {
			return err
		}
		defer stop()
	}
	n.mu.Lock()
	n.cons = NewConsumerWith(n.intake, n.leases, n.holder, func(d Delivery) { n.handle(d, take) },
		ConsumerOptions{OnTake: forget, Wait: n.waitHealthy, Log: n.log})
	cons := n.cons
	n.mu.Unlock()
	var wg sync.WaitGroup
	rctx, cancel := context.WithCancel(ctx)
	wg.Go(func() { n.retryAcks(rctx) })
	err := cons.Run(ctx)
	cancel()
	wg.Wait()
	return err
}

// Forwarded runs an admin API request forwarded by another process (gateway.Forwarded).
type Forwarded func(ctx context.Context, kind string, body []byte) (status int, out []byte)

// forwardEnvelope is a forwarded request or its answer on NATS.
type forwardEnvelope struct {
	Kind   string          `json:"kind,omitempty"`
	Status int             `json:"status,omitempty"`
	Body   json.RawMessage `json:"body"`
}

// maxForwarded bounds the forwarded requests running at once here; past it they are
// answered 503 at once.
const maxForwarded = 32

// Forward passes an admin API request about the chat sessionKey to the process holding its
// partition and returns that process's answer; ok is false when this process holds it, or
// nobody does, or the holder did not answer at all: the caller handles it then.
func (n *Node) Forward(ctx context.Context, sessionKey, kind string, body []byte) (int, []byte, bool) {
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	holder, err := n.leases.Holder(lctx, "intake."+strconv.Itoa(n.Partition(sessionKey)))
	cancel()
	if err != nil || holder == "" || holder == n.holder {
		return 0, nil, false
	}
	n.log.Debug("forwarding an admin request to the process answering the chat", "kind", kind, "session", sessionKey, "to", holder)
	data, _ := json.Marshal(forwardEnvelope{Kind: kind, Body: body})
	rctx, cancel := context.WithTimeout(ctx, 10*time.Minute) // wait: delivered lasts a turn
	defer cancel()
	msg, err := n.nc.RequestWithContext(rctx, "gateway.api."+holder, data)
	if errors.Is(err, nats.ErrNoResponders) {
		return 0, nil, false // the holder is gone: its partitions come here or elsewhere soon
	}
	if err != nil {
		out, _ := json.Marshal(map[string]any{"error": "the process answering this chat did not reply: " + scrub(err, n.url).Error()})
		return 502, out, true
	}
	var env forwardEnvelope
	if err := json.Unmarshal(msg.Data, &env); err != nil || env.Status == 0 {
		out, _ := json.Marshal(map[string]any{"error": "the process answering this chat gave an unreadable reply"})
		return 502, out, true
	}
	return env.Status, env.Body, true
}

// serveForwarded answers the requests other processes forward here, until ctx ends or
// stop is called; stop waits for those running.
func (n *Node) serveForwarded(ctx context.Context, handle Forwarded) (stop func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	sem := make(chan struct{}, maxForwarded)
	var wg sync.WaitGroup
	reply := func(m *nats.Msg, status int, body []byte) {
		data, _ := json.Marshal(forwardEnvelope{Status: status, Body: body})
		_ = m.Respond(data)
	}
	sub, err := n.nc.Subscribe("gateway.api."+n.holder, func(m *nats.Msg) {
		var env forwardEnvelope
		if err := json.Unmarshal(m.Data, &env); err != nil {
			reply(m, 400, []byte(`{"error":"unreadable forwarded request"}`))
			return
		}
		select {
		case sem <- struct{}{}:
		default:
			reply(m, 503, []byte(`{"error":"too many forwarded requests at once; try again"}`))
			return
		}
		wg.Go(func() {
			defer func() { <-sem }()
			n.log.Debug("running an admin request forwarded by another process", "kind", env.Kind)
			status, out := handle(ctx, env.Kind, env.Body)
			reply(m, status, out)
		})
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("cluster: nats: cannot take forwarded requests: %w", scrub(err, n.url))
	}
	return func() {
		_ = sub.Unsubscribe()
		cancel()
		wg.Wait()
	}, nil
}

// handle passes a delivery to the gateway, once: a message already being answered here
// (its partition was lost and taken again) is not handed over twice; the newer delivery
// is the one acked.
func (n *Node) handle(d Delivery, take func(uint64, []byte, bool) error) {
	n.mu.Lock()
	prev, again := n.inflight[d.Seq]
	n.inflight[d.Seq] = d
	n.mu.Unlock()
	if again {
		if prev.Parked() {
			d.Park() // still waiting here, as it was
		}
		return
	}
	if err := take(d.Seq, d.Body, d.Backlog); err != nil {
		// Not taken (stopping): it stays unacked for the partition's next holder.
		n.mu.Lock()
		delete(n.inflight, d.Seq)
		n.mu.Unlock()
	}
}

// retryAcks retries the acks that failed, about once a second, until ctx ends.
func (n *Node) retryAcks(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		n.mu.Lock()
		batch := maps.Clone(n.retry)
		n.mu.Unlock()
		for seq, r := range batch {
			actx, cancel := context.WithTimeout(ctx, 3*time.Second)
			err := r.d.Ack(actx)
			cancel()
			r.tries++
			if err == nil || r.tries >= ackAttempts {
				if err != nil {
					n.log.Error("gave up acking an answered message; it may be answered again", "seq", seq, "err", scrub(err, n.url))
				}
				n.mu.Lock()
				delete(n.retry, seq)
				n.mu.Unlock()
			}
		}
	}
}

// Pause stops handing messages over, keeping the partitions until Run ends (see Run).
func (n *Node) Pause() {
	n.mu.Lock()
	cons := n.cons
	n.mu.Unlock()
	if cons != nil {
		cons.Pause()
	}
}

// Healthy reports why the cluster's engines cannot be used now: NATS disconnected, or
// Postgres not answering (checked at most once a second). Nil when both are up.
func (n *Node) Healthy(ctx context.Context) error {
	if s := n.nc.Status(); s != nats.CONNECTED {
		return fmt.Errorf("NATS at %s is unreachable (%s)", Redact(n.url), strings.ToLower(s.String()))
	}
	n.healthMu.Lock()
	defer n.healthMu.Unlock()
	if time.Since(n.healthAt) < n.healthWait {
		return n.healthErr
	}
	n.healthErr = n.pg.ping(ctx)
	n.healthAt = time.Now()
	return n.healthErr
}

// waitHealthy blocks while Healthy fails, until ctx ends.
func (n *Node) waitHealthy(ctx context.Context) error {
	told := false
	for {
		hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := n.Healthy(hctx)
		cancel()
		if err == nil {
			if told {
				n.log.Info("cluster engines are back; answering again")
			}
			return nil
		}
		if !told {
			n.log.Warn("waiting for the cluster's engines before answering", "err", err)
			told = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// NodeStatus is what /api/v1/status shows of the cluster.
type NodeStatus struct {
	Holder     string            `json:"holder"`
	Partitions int               `json:"partitions"`
	Held       []PartitionStatus `json:"held"`
	Healthy    bool              `json:"healthy"`
	Error      string            `json:"error,omitempty"`
}

// Status reports this process's partitions, their lag, and the engines' health.
func (n *Node) Status(ctx context.Context) NodeStatus {
	st := NodeStatus{Holder: n.holder, Partitions: n.intake.Partitions(), Held: []PartitionStatus{}, Healthy: true}
	n.mu.Lock()
	cons := n.cons
	n.mu.Unlock()
	if cons != nil {
		st.Held = cons.Status()
	}
	if err := n.Healthy(ctx); err != nil {
		st.Healthy, st.Error = false, err.Error()
	}
	return st
}

// Close closes the NATS connection; call it after Run returned.
func (n *Node) Close() {
	n.nc.Close()
}

// Partition is the partition of a session key in this cluster.
func (n *Node) Partition(sessionKey string) int {
	return Partition(sessionKey, n.intake.Partitions())
}

// Collector exposes partition ownership and lag as Prometheus metrics.
func (n *Node) Collector() prometheus.Collector {
	return &nodeCollector{n: n,
		held:     prometheus.NewDesc("gateway_cluster_partitions_held", "Intake partitions this process holds.", nil, nil),
		lag:      prometheus.NewDesc("gateway_cluster_partition_lag", "Messages stored in a held partition and not yet handed over here.", []string{"partition"}, nil),
		inFlight: prometheus.NewDesc("gateway_cluster_partition_in_flight", "Messages of a held partition being answered here.", []string{"partition"}, nil),
		up:       prometheus.NewDesc("gateway_cluster_up", "1 when NATS and Postgres are reachable.", nil, nil),
	}
}

type nodeCollector struct {
	n                       *Node
	held, lag, inFlight, up *prometheus.Desc
}

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.held
	ch <- c.lag
	ch <- c.inFlight
	ch <- c.up
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st := c.n.Status(ctx)
	ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(len(st.Held)))
	for _, p := range st.Held {
		label := strconv.Itoa(p.Partition)
		ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(p.Lag), label)
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(p.InFlight), label)
	}
	up := 0.0
	if st.Healthy {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up)
}

// dedupSeen reports whether key was seen within the dedup window.
func (p *Postgres) dedupSeen(ctx context.Context, key string) (bool, error) {
	var one int
	err := p.pool.QueryRow(ctx, `SELECT 1 FROM gateway_dedup WHERE key = $1 AND seen_at > $2`,
		key, p.now().Add(-p.limits.DedupAge).UnixNano()).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, p.wrap("cannot read the dedup window", err)
	}
	return true, nil
}

// dedupRecord remembers key in the dedup window, pruning it now and then.
func (p *Postgres) dedupRecord(ctx context.Context, key string) error {
	now := p.now()
	if _, err := p.pool.Exec(ctx, `INSERT INTO gateway_dedup (key, seen_at) VALUES ($1, $2)
		ON CONFLICT (key) DO UPDATE SET seen_at = EXCLUDED.seen_at`, key, now.UnixNano()); err != nil {
		return p.wrap("cannot record a message id", err)
	}
	if p.accepts.Add(1)%int64(max(1, p.limits.DedupMax/10)) == 0 {
		_ = p.pruneDedup(ctx, now) // the bound is soft: retried at the next turn
	}
	return nil
}
