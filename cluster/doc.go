// Package cluster runs the gateway's contracts on engines people already operate, so that
// several `gateway run` processes can share the work: Postgres for sessions and gateway
// state, NATS JetStream for intake, per-chat order and connection ownership. It is wired
// only when the `cluster:` section is set; a single node (no section) touches neither.
//
// # Built
//
//   - Postgres (github.com/jackc/pgx/v5): Postgres implements the gateway's Journal and
//     Settings and state.Cursors (the interfaces state.DB implements), and Sessions is the
//     harness.SessionStore (each key's history log as rows of appends). The schema is
//     created and migrated by the gateway at start (gateway_schema_version, one
//     transaction under an advisory lock, so processes starting together migrate once; a
//     newer schema than the binary knows is refused). Tables are prefixed gateway_.
//     Accept is one transaction: an INSERT … ON CONFLICT on gateway_dedup decides a
//     redelivery atomically across processes. Every call is bounded by DefaultTimeout.
//   - Check (`gateway check`) and OpenPostgres say what is wrong in plain words; no error
//     carries the URL's password (Redact, scrub).
//   - JetStream (github.com/nats-io/nats.go/jetstream), the parts intake will stand on:
//     Intake.Publish stores a message in the work-queue stream GATEWAY_INTAKE under the
//     subject of its partition (Partition: fnv32a of the session key) and returns once
//     JetStream acknowledged it, a platform redelivery (same Nats-Msg-Id) stored once;
//     Leases (a KV bucket whose entries expire TTL after their last write) give a name to
//     one holder at a time and move it to a survivor TTL after the holder stops renewing.
//     Consumer holds a fair share of the partitions (ceil(partitions / live members),
//     members being "member.<holder>" leases) through "intake.<p>" leases renewed every
//     TTL/4, hands over a partition above its share only after its delivered messages were
//     acked, and on taking a partition recreates its durable consumer from the oldest
//     unacked message (the stream is a work queue: acked messages are gone), so what a dead
//     holder was handed and never acked is delivered to the new holder, first, in order.
//     None of this is wired into the gateway yet.
//   - Holder (NewHolder) is channels.Holder on the Leases bucket, for connections a
//     platform allows once per token: Hold retries Acquire every TTL/4 until it gets the
//     lease or its context ends; the hold's own goroutine renews every TTL/4 and ends held
//     on ErrLeaseLost or once TTL passed since the last renewal that succeeded (counted from
//     before it was sent, so held ends no later than the lease can expire); release stops it
//     and deletes the lease. The Telegram adapter takes it through Options.Holder: in
//     polling mode only the holder of "conn.telegram.<bot id>" runs getUpdates, the others
//     wait in Hold and still send; webhook mode ignores it.
//   - Postgres.Budget(name, perSecond, burst) is channels.Budget, the bot's send rate shared
//     by every process: a token bucket row in gateway_send_budget, refilled and taken by one
//     UPDATE on the database's clock (clock_timestamp()), so processes' clocks need not
//     agree; without a token it waits until the next (at most 1 s, jittered) and asks again.
//     When Postgres cannot answer (2 s per call) the send goes: each process keeps its own
//     pace and Telegram's retry_after still holds. channels.Sender.Shared takes it for chat
//     sends, after the process's own Global pacer; telegram.Options.Budget sets it.
//   - Postgres also implements channels.State (the adapters' cursors and remembered keys):
//     Remember/Remembered on gateway_remembered, each set bounded softly (pruned every
//     max/10 remembers per process, oldest first) and aged out. Both tables are schema
//     version 2.
//   - Tests: the same behaviour suites as the single node (state/statetest,
//     harness/storetest) against a throwaway Postgres (cluster/pgtest: initdb in a temp dir,
//     a free loopback port, run as nobody under root, Restart on the same data and port);
//     NATS embedded (cluster/natstest: New returns a Server that Restart stops and starts
//     again on the same port and store, JetStream's streams and buckets kept).
//
// # Not built yet: the design to follow
//
// Until intake moves to JetStream, the Postgres journal is shared by every process on the
// database and each replays all of it at start, so `gateway run` warns: one process per
// database. The steps, in order:
//
// Wire intake (gateway/intake.go is the seam; keep the edit there small). In cluster mode
// Deliver publishes instead of journaling: Intake.Publish(session key, dedup key, the
// journaled JSON) and the adapter is acknowledged only after it returns (a failure is the
// same refusal as a journal failure today). The session key must be the router's
// (gateway.sessionKey for the message's channel/chat/thread), so one chat is one partition.
// A Consumer per process (holder: hostname + pid + start time) hands each Delivery to the
// gateway's queue as replay does today (decode journaled, set Seq); settle acks it
// (Delivery.Ack) instead of journal.Done — so gateway.Message needs a way back to its
// Delivery (a map seq → Delivery in the cluster adapter, keyed by the stream sequence).
// The JetStream duplicate window (IntakeConfig.Duplicates) is short; keep the Postgres
// dedup (Postgres.Accept with a nil body, or a dedup-only method) for the long window.
// Replay of the Postgres journal then goes away in cluster mode; Pending stays for a single
// node. Make cluster.nats_url required again only once this is wired (Config.Validate
// already requires it).
//
// Connections that exist once per token (Telegram long polling, a Discord shard): a lease
// "conn.telegram.<bot id>" on the same Leases bucket; only the holder starts the adapter's
// receive loop, the others retry Acquire every TTL/4 and start it when they get it (TTL
// 15 s meets "moves within 15 s" with room: take 10 s). Telegram webhooks and Slack HTTP
// events are served by any process: they only publish. Sending is done by whichever
// process answers (the partition's holder); adapters must be able to send without
// holding the receive lease.
//
// Telegram's per-bot send budget across processes: a token bucket shared through Postgres
// (one row per bot, SELECT … FOR UPDATE, refill by elapsed time) or a KV entry updated
// with compare-and-set; taken before each send in the adapter's pacer.
//
// Operability: /readyz false while NATS (nc.Status() != CONNECTED) or Postgres (pool Ping,
// cached for a second) is unreachable; /api/v1/status and metrics list Consumer.Held() and
// each held consumer's NumPending (lag); `gateway check` reaches NATS too
// (nats.Connect + JetStream AccountInfo, password scrubbed like Postgres). README:
// "Running more than one" with a compose example (NATS with -js, Postgres, three gateways).
//
// Tests still to write: three `gateway run` processes (in-process, like
// gatewaycli.startGateway) against natstest and pgtest with the fake Telegram (both modes),
// fake Slack and the fake model; 200 chats × 5 messages answered once, in order; one
// process killed mid-turn (close its NATS connection and cancel it without Stop);
// Postgres and NATS restarted during load (pgtest needs Restart: stop and start postgres on
// the same data dir and port; natstest the same with the same StoreDir); figures for 1 vs 3
// processes with the fake model at 200 ms.
package cluster
