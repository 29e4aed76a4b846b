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
//   - Tests: the same behaviour suites as the single node (state/statetest,
//     harness/storetest) against a throwaway Postgres (cluster/pgtest: initdb in a temp dir,
//     a free loopback port, run as nobody under root); NATS embedded (cluster/natstest).
//
// # Not built yet: the design to follow
//
// Until intake moves to JetStream, the Postgres journal is shared by every process on the
// database and each replays all of it at start, so `gateway run` warns: one process per
// database. The steps, in order:
//
// Intake on JetStream (github.com/nats-io/nats.go, jetstream package). One stream
// GATEWAY_INTAKE, subjects gateway.intake.<p> for partitions p in [0, P) (P fixed in
// config, default 64; changing it needs a drained stream), p = fnv32a(session key) mod P —
// the session key the router computes, so one chat is one partition. Deliver replaces
// journal.Accept by a publish with Nats-Msg-Id = the dedup key (JetStream's duplicate
// window drops redeliveries; the Postgres dedup table stays for windows longer than the
// stream's), and returns to the adapter only after the PubAck: the platform is acknowledged
// only for what JetStream has. Settle replaces journal.Done by msg.Ack(); Pending/replay go
// away (the consumer redelivers what was not acked). A gateway.Intake interface with the
// two implementations (local journal, JetStream) is the seam in gateway/intake.go.
//
// One active consumer per partition: a durable pull consumer per partition
// ("intake-<p>", AckExplicit, MaxAckPending large, AckWait 30 s with msg.InProgress()
// every 10 s while a turn runs). Ownership by a lease in a JetStream KV bucket
// GATEWAY_OWNERS (key p, value = process id, bucket TTL 15 s): a process Creates the key to
// take a free partition, Updates it with the revision every 5 s to keep it, and stops
// fetching the moment an update fails. Partitions are balanced by each process taking at
// most ceil(P / live processes) (live processes: a second KV bucket of heartbeats). When a
// process dies its keys expire, another Creates them and fetches: the unacked messages
// are redelivered in stream order, so the killed turn's message is answered there, once
// (the dead process never acked it; the dedup key keeps a platform redelivery out).
// Per-chat order holds because one process fetches a partition at a time and the gateway's
// per-session actor keeps order within it.
//
// Connections that exist once per token (Telegram long polling, a Discord shard) take the
// same kind of lease (key "conn.telegram.<bot id>"): only the holder starts the adapter's
// receive loop; a survivor's watcher starts it when the key expires (within the 15 s
// TTL). Telegram webhooks and Slack HTTP events are served by any process: they only
// publish. Sending is from whichever process owns the chat's partition.
//
// Telegram's per-bot send budget across processes: a token bucket in the same KV (or a
// Postgres row updated with SELECT … FOR UPDATE), taken before each send.
//
// Operability: /readyz false while NATS or Postgres is unreachable (a pgxpool Ping and
// nc.Status()); /api/v1/status and metrics list owned partitions and their consumer's
// NumPending (lag). Tests: NATS from github.com/nats-io/nats-server/v2 embedded on
// loopback (server.NewServer with JetStream and a temp StoreDir), three `gateway run`
// processes against it and pgtest, with the fake platforms and the fake model.
package cluster
