package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"gateway/channels"
	"gateway/harness"
	"gateway/state"
)

// Postgres is the gateway's state in Postgres: the intake journal, the dedup window,
// per-chat settings and platform cursors (the same interfaces as state.DB), and the session
// store (Sessions). Safe for concurrent use, by any number of processes on one database.
type Postgres struct {
	pool      *pgxpool.Pool
	url       string
	limits    state.Limits
	timeout   time.Duration
	now       func() time.Time
	accepts   atomic.Int64
	remembers atomic.Int64
}

var (
	_ state.Journal        = (*Postgres)(nil)
	_ state.Settings       = (*Postgres)(nil)
	_ state.Cursors        = (*Postgres)(nil)
	_ channels.State       = (*Postgres)(nil)
	_ harness.SessionStore = (*Sessions)(nil)
)

// DefaultTimeout bounds each call when Postgres does not answer: the caller gets an error
// rather than waiting forever.
const DefaultTimeout = 10 * time.Second

// OpenPostgres connects to the database at url and creates or migrates the gateway's
// schema. Errors say what is wrong in plain words and never contain the URL's password.
func OpenPostgres(ctx context.Context, url string, limits state.Limits) (*Postgres, error) {
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("cluster.postgres_url: %s cannot be read: %w", Redact(url), scrub(err, url))
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("cluster.postgres_url: %w", scrub(err, url))
	}
	p := &Postgres{pool: pool, url: url, limits: withDefaults(limits), timeout: DefaultTimeout, now: time.Now}
	if err := p.ping(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, p.wrap("cannot create or update the gateway's tables", err)
	}
	return p, nil
}

// Check reaches the database at url the way OpenPostgres does and reports, in plain words,
// why it cannot be used; it creates and changes nothing (`gateway check`).
func Check(ctx context.Context, url string) error {
	pcfg, err := pgx.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("cluster.postgres_url: %s cannot be read: %w", Redact(url), scrub(err, url))
	}
	conn, err := pgx.ConnectConfig(ctx, pcfg)
	if err != nil {
		return describe(url, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var v int
	err = conn.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM gateway_schema_version`).Scan(&v)
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && pe.Code == "42P01": // undefined_table: a new database, created at start
		return nil
	case err != nil:
		return describe(url, err)
	case v > len(migrations)-1:
		return fmt.Errorf("cluster.postgres_url: the database's gateway tables are version %d, newer than this gateway knows (%d): run the newer gateway, or upgrade this one", v, len(migrations)-1)
	}
	return nil
}

func (p *Postgres) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	if err := p.pool.Ping(ctx); err != nil {
		return describe(p.url, err)
	}
	return nil
}

// describe turns a connection error into plain words naming the key and the host.
func describe(url string, err error) error {
	where := Redact(url)
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "28P01", "28000":
			return fmt.Errorf("cluster.postgres_url: Postgres at %s refused the user name or password (%s)", where, pe.Message)
		case "3D000":
			return fmt.Errorf("cluster.postgres_url: the database in %s does not exist; create it (createdb) or name another", where)
		case "42501":
			return fmt.Errorf("cluster.postgres_url: the user in %s may not use the database: %s", where, pe.Message)
		}
		return fmt.Errorf("cluster.postgres_url: Postgres at %s: %s", where, pe.Message)
	}
	msg := scrub(err, url).Error()
	switch {
	case strings.Contains(msg, "connection refused"):
		return fmt.Errorf("cluster.postgres_url: nothing accepts connections at %s (is Postgres running, on that host and port?)", where)
	case strings.Contains(msg, "no such host"):
		return fmt.Errorf("cluster.postgres_url: the host in %s is not known", where)
	case errors.Is(err, context.DeadlineExceeded) || strings.Contains(msg, "timeout"):
		return fmt.Errorf("cluster.postgres_url: Postgres at %s did not answer in time", where)
	}
	return fmt.Errorf("cluster.postgres_url: cannot reach Postgres at %s: %s", where, msg)
}

func (p *Postgres) wrap(what string, err error) error {
	if errors.Is(err, state.ErrDuplicate) {
		return err
	}
	return fmt.Errorf("cluster: postgres: %s: %w", what, scrub(err, p.url))
}

// Close closes the connections.
func (p *Postgres) Close() error {
	p.pool.Close()
	return nil
}

func (p *Postgres) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), p.timeout)
}

func withDefaults(l state.Limits) state.Limits {
	if l.DedupMax <= 0 {
		l.DedupMax = 100_000
	}
	if l.DedupAge <= 0 {
		l.DedupAge = 7 * 24 * time.Hour
	}
	return l
}

// Accept stores body in the journal and remembers dedupKey, in one transaction: as
// state.DB.Accept. Two processes accepting the same key at once: one wins, the other gets
// state.ErrDuplicate.
func (p *Postgres) Accept(dedupKey string, body []byte) (uint64, error) {
	ctx, cancel := p.ctx()
	defer cancel()
	now := p.now()
	var seq int64
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if dedupKey != "" {
			var fresh bool
			err := tx.QueryRow(ctx, `INSERT INTO gateway_dedup (key, seen_at) VALUES ($1, $2)
				ON CONFLICT (key) DO UPDATE SET seen_at = EXCLUDED.seen_at WHERE gateway_dedup.seen_at <= $3
				RETURNING true`, dedupKey, now.UnixNano(), now.Add(-p.limits.DedupAge).UnixNano()).Scan(&fresh)
			if errors.Is(err, pgx.ErrNoRows) {
				return state.ErrDuplicate
			}
			if err != nil {
				return err
			}
		}
		if body == nil {
			body = []byte{}
		}
		return tx.QueryRow(ctx, `INSERT INTO gateway_journal (body) VALUES ($1) RETURNING seq`, body).Scan(&seq)
	})
	if err != nil {
		return 0, p.wrap("cannot journal the message", err)
	}
	if dedupKey != "" && p.accepts.Add(1)%int64(max(1, p.limits.DedupMax/10)) == 0 {
		// The bound is soft: a failed prune is retried at the next turn.
		_ = p.pruneDedup(ctx, now)
	}
	return uint64(seq), nil
}

// pruneDedup drops ids older than the window, then the oldest beyond DedupMax.
func (p *Postgres) pruneDedup(ctx context.Context, now time.Time) error {
	if _, err := p.pool.Exec(ctx, `DELETE FROM gateway_dedup WHERE seen_at <= $1`, now.Add(-p.limits.DedupAge).UnixNano()); err != nil {
		return err
	}
	_, err := p.pool.Exec(ctx, `DELETE FROM gateway_dedup WHERE key IN
		(SELECT key FROM gateway_dedup ORDER BY seen_at DESC, key OFFSET $1)`, p.limits.DedupMax)
	return err
}

// Done removes an answered message from the journal. Unknown seqs are ignored.
func (p *Postgres) Done(seq uint64) error {
	ctx, cancel := p.ctx()
	defer cancel()
	if _, err := p.pool.Exec(ctx, `DELETE FROM gateway_journal WHERE seq = $1`, int64(seq)); err != nil {
		return p.wrap("cannot mark a message answered", err)
	}
	return nil
}

// Pending lists the journal in acceptance order.
func (p *Postgres) Pending() ([]state.Entry, error) {
	ctx, cancel := p.ctx()
	defer cancel()
	rows, err := p.pool.Query(ctx, `SELECT seq, body FROM gateway_journal ORDER BY seq`)
	if err != nil {
		return nil, p.wrap("cannot read the journal", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (state.Entry, error) {
		var e state.Entry
		var seq int64
		err := r.Scan(&seq, &e.Body)
		e.Seq = uint64(seq)
		return e, err
	})
	if err != nil {
		return nil, p.wrap("cannot read the journal", err)
	}
	return out, nil
}

// Setting reads one value; false when unset.
func (p *Postgres) Setting(scope, name string) (string, bool, error) {
	return p.get(`SELECT value FROM gateway_settings WHERE scope = $1 AND name = $2`, scope, name)
}

// SetSetting stores one value.
func (p *Postgres) SetSetting(scope, name, value string) error {
	return p.exec("cannot store a setting", `INSERT INTO gateway_settings (scope, name, value) VALUES ($1, $2, $3)
		ON CONFLICT (scope, name) DO UPDATE SET value = EXCLUDED.value`, scope, name, value)
}

// DeleteSetting removes one value.
func (p *Postgres) DeleteSetting(scope, name string) error {
	return p.exec("cannot delete a setting", `DELETE FROM gateway_settings WHERE scope = $1 AND name = $2`, scope, name)
}

// Cursor reads a platform cursor; false when unset.
func (p *Postgres) Cursor(name string) (string, bool, error) {
	return p.get(`SELECT value FROM gateway_cursors WHERE name = $1`, name)
}

// SetCursor stores a platform cursor.
func (p *Postgres) SetCursor(name, value string) error {
	return p.exec("cannot store a cursor", `INSERT INTO gateway_cursors (name, value) VALUES ($1, $2)
		ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value`, name, value)
}

// Remember adds key to set (or refreshes its time), as state.DB.Remember: the set keeps at
// most `most` keys (a soft bound: each process prunes every most/10 of its own remembers, so
// the set may hold a little more between prunes), each for at most age, the oldest
// forgotten first.
func (p *Postgres) Remember(set, key string, most int, age time.Duration) error {
	if set == "" || key == "" || most <= 0 || age <= 0 {
		return errors.New("cluster: postgres: remember: a set, a key and positive bounds are required")
	}
	ctx, cancel := p.ctx()
	defer cancel()
	now := p.now()
	if _, err := p.pool.Exec(ctx, `INSERT INTO gateway_remembered ("set", key, at) VALUES ($1, $2, $3)
		ON CONFLICT ("set", key) DO UPDATE SET at = greatest(gateway_remembered.at, EXCLUDED.at)`, set, key, now.UnixNano()); err != nil {
		return p.wrap("cannot remember a key", err)
	}
	if p.remembers.Add(1)%int64(max(1, most/10)) == 0 {
		if err := p.pruneRemembered(ctx, set, most, now.Add(-age)); err != nil {
			return p.wrap("cannot forget the oldest remembered keys", err)
		}
	}
	return nil
}

// pruneRemembered drops set's keys older than before, then the oldest beyond max.
func (p *Postgres) pruneRemembered(ctx context.Context, set string, most int, before time.Time) error {
	if _, err := p.pool.Exec(ctx, `DELETE FROM gateway_remembered WHERE "set" = $1 AND at <= $2`, set, before.UnixNano()); err != nil {
		return err
	}
	_, err := p.pool.Exec(ctx, `DELETE FROM gateway_remembered WHERE "set" = $1 AND key IN
		(SELECT key FROM gateway_remembered WHERE "set" = $1 ORDER BY at DESC, key OFFSET $2)`, set, most)
	return err
}

// Remembered reports whether key was remembered in set less than age ago.
func (p *Postgres) Remembered(set, key string, age time.Duration) (bool, error) {
	ctx, cancel := p.ctx()
	defer cancel()
	var ok bool
	err := p.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM gateway_remembered WHERE "set" = $1 AND key = $2 AND at > $3)`,
		set, key, p.now().Add(-age).UnixNano()).Scan(&ok)
	if err != nil {
		return false, p.wrap("cannot read a remembered key", err)
	}
	return ok, nil
}

func (p *Postgres) get(q string, args ...any) (string, bool, error) {
	ctx, cancel := p.ctx()
	defer cancel()
	var v string
	err := p.pool.QueryRow(ctx, q, args...).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, p.wrap("cannot read", err)
	}
	return v, true, nil
}

func (p *Postgres) exec(what, q string, args ...any) error {
	ctx, cancel := p.ctx()
	defer cancel()
	if _, err := p.pool.Exec(ctx, q, args...); err != nil {
		return p.wrap(what, err)
	}
	return nil
}

// Sessions is the session store on the same database: each key's history log is kept as
// the rows of its appends, in order. Close ends the store, not the connections (Postgres.Close).
type Sessions struct {
	p      *Postgres
	mu     sync.Mutex
	closed bool
}

// Sessions returns the session store (harness.SessionStore) on p's database.
func (p *Postgres) Sessions() *Sessions { return &Sessions{p: p} }

// ReadLog returns key's log; nil when there is none. While Postgres is unreachable (a
// restart) it waits for it, up to outage.
func (s *Sessions) ReadLog(key string) ([]byte, error) {
	var out []byte
	err := s.p.waitOut(func() error {
		ctx, cancel := s.p.ctx()
		defer cancel()
		rows, err := s.p.pool.Query(ctx, `SELECT lines FROM gateway_session_log WHERE key = $1 ORDER BY n`, key)
		if err != nil {
			return err
		}
		var buf bytes.Buffer
		var chunk []byte
		if _, err = pgx.ForEachRow(rows, []any{&chunk}, func() error { buf.Write(chunk); return nil }); err != nil {
			return err
		}
		if buf.Len() > 0 {
			out = buf.Bytes()
		}
		return nil
	})
	if err != nil {
		return nil, s.p.wrap("cannot read the history of "+key, err)
	}
	return out, nil
}

// AppendLog appends lines to key's log in one statement (all or nothing). While Postgres
// is unreachable it waits for it, up to outage.
func (s *Sessions) AppendLog(key string, lines []byte) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return errors.New("the history store is closed")
	}
	err := s.p.waitOut(func() error {
		ctx, cancel := s.p.ctx()
		defer cancel()
		_, err := s.p.pool.Exec(ctx, `INSERT INTO gateway_session_log (key, lines) VALUES ($1, $2)`, key, lines)
		return err
	})
	if err != nil {
		return s.p.wrap("cannot save the history of "+key, err)
	}
	return nil
}

// MoveLog gives from's log to to (see harness.SessionStore), in one transaction: the rows
// change key together and the first one's header is rewritten to name to, or nothing
// changes. Two moves to the same key at once (two processes learning of one migration)
// are serialised by a lock on to, and the second finds nothing left to move.
func (s *Sessions) MoveLog(from, to string) (harness.LogMove, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return 0, errors.New("the history store is closed")
	}
	var out harness.LogMove
	err := s.p.waitOut(func() error {
		ctx, cancel := s.p.ctx()
		defer cancel()
		return pgx.BeginFunc(ctx, s.p.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('gateway_session_log:' || $1))`, to); err != nil {
				return err
			}
			var n int64
			var first []byte
			err := tx.QueryRow(ctx, `SELECT n, lines FROM gateway_session_log WHERE key = $1 ORDER BY n LIMIT 1`, from).Scan(&n, &first)
			if errors.Is(err, pgx.ErrNoRows) {
				out = harness.LogAbsent
				return nil
			}
			if err != nil {
				return err
			}
			var taken bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM gateway_session_log WHERE key = $1)`, to).Scan(&taken); err != nil {
				return err
			}
			if taken {
				out = harness.LogKept
				return nil
			}
			if _, err := tx.Exec(ctx, `UPDATE gateway_session_log SET key = $2 WHERE key = $1`, from, to); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE gateway_session_log SET lines = $3 WHERE key = $1 AND n = $2`, to, n, harness.Rekey(first, to)); err != nil {
				return err
			}
			out = harness.LogMoved
			return nil
		})
	})
	if err != nil {
		return 0, s.p.wrap("cannot move the history of "+from+" to "+to, err)
	}
	return out, nil
}

// outage is how long a history read or write waits for an unreachable Postgres (a
// restart, a failover) before the turn fails with its error.
const outage = 60 * time.Second

// waitOut runs fn, again while it fails for want of a connection (not for an error in
// the statement), for up to outage.
func (p *Postgres) waitOut(fn func() error) error {
	deadline := time.Now().Add(outage)
	wait := 250 * time.Millisecond
	for {
		err := fn()
		var pe *pgconn.PgError
		// Classes 08 (connection) and 57 (the server shutting down) are an outage too.
		reported := errors.As(err, &pe) && !strings.HasPrefix(pe.Code, "08") && !strings.HasPrefix(pe.Code, "57")
		if err == nil || reported || time.Now().After(deadline) {
			return err
		}
		time.Sleep(wait)
		wait = min(2*wait, 2*time.Second)
	}
}

// Close ends the store: later appends fail.
func (s *Sessions) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}
