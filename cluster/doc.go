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
//     Node (below) wires it into the gateway.
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
// # Wired (Node)
//
// Node is this process's part: cmd/internal/gatewaycli opens it when `cluster:` is set and
// hands it to the gateway as its SharedIntake (gateway/intake.go). Deliver publishes to the
// chat's partition (the partition of gateway.SessionKey), checking the Postgres dedup window
// before and recording the id after, and the adapter acknowledges only then; a pinned
// channel (the web chat) is answered where it arrived. Node.Run consumes the partitions the
// Consumer holds and hands each message to Gateway.Take; settle acks it (Node.Done, retried
// while NATS is away). A message handed over again after its partition was lost and taken
// back is not handed twice. OnTake makes the gateway Forget the partition's idle sessions,
// whose history another process may have extended. Consumer.Wait holds deliveries while
// Postgres or NATS is unreachable (Node.Healthy, also /readyz); history reads and writes
// wait out an outage of up to a minute. Shutdown: Pause (nothing new is handed over), the
// gateway's Stop (what was handed over is answered and acked), then Run ends and the
// partitions are released. Telegram polls under the "conn.telegram.<bot id>" lease and
// sends within Postgres.Budget("telegram.<bot id>", 30, 30).
//
// The Discord adapter holds its gateway connection under "conn.discord.<bot id>" the same
// way, and keeps its catch-up cursors in Postgres, so the process taking the connection
// over reads what was posted meanwhile. The admin API's inject reaches a chat through any
// process: Node.Forward passes it over NATS (gateway.api.<holder>) to the process holding
// the chat's partition (gateway.Forwarded), which publishes it to that partition before it
// answers; it comes back through Take, the chat's session decides how it goes in, and it is
// acked with the answer of the turn that carries it, so a process dying meanwhile does not
// lose it. One kept for the chat's next turn is parked (Delivery.Park): it does not keep its
// partition from being handed over, the next holder is delivered it again, and Unpark tells
// this process, at the turn that would carry it, that it is no longer its own.
//
// # Not built
//
//   - Media users send are kept under the answering process's state_dir.
//   - The web chat's messages are answered by the process the browser is connected to, and
//     are not journaled in cluster mode.
package cluster
