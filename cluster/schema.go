package cluster

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// migrations[v] takes the schema from version v-1 to v; migrations[0] is unused. Append
// only: a released step is never edited. Every table is prefixed gateway_ so that the
// database may be shared.
var migrations = []string{
	1: `
CREATE TABLE gateway_journal (
	seq         bigserial PRIMARY KEY,
	body        bytea NOT NULL,
	accepted_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE gateway_dedup (
	key     text PRIMARY KEY,
	seen_at bigint NOT NULL -- unix nanoseconds, from the accepting process's clock
);
CREATE INDEX gateway_dedup_seen_at ON gateway_dedup (seen_at);
CREATE TABLE gateway_settings (
	scope text NOT NULL,
	name  text NOT NULL,
	value text NOT NULL,
	PRIMARY KEY (scope, name)
);
CREATE TABLE gateway_cursors (
	name  text PRIMARY KEY,
	value text NOT NULL
);
CREATE TABLE gateway_session_log (
	key   text NOT NULL,
	n     bigserial,
	lines bytea NOT NULL,
	PRIMARY KEY (key, n)
);`,
	2: `
CREATE TABLE gateway_send_budget (
	name       text PRIMARY KEY,
	tokens     double precision NOT NULL,
	updated_at timestamptz NOT NULL
);
CREATE TABLE gateway_remembered (
	"set" text NOT NULL,
	key   text NOT NULL,
	at    bigint NOT NULL, -- unix nanoseconds, from the remembering process's clock
	PRIMARY KEY ("set", key)
);
CREATE INDEX gateway_remembered_at ON gateway_remembered ("set", at);`,
}

// migrateLock is the advisory lock that serialises migrations across processes.
const migrateLock = 0x6761746577617901 // "gateway" 1

// migrate brings the schema to the newest version in one transaction, under an advisory
// lock, so that gateways starting together migrate once. A schema newer than this binary
// knows is an error: an older gateway must not write to tables it does not understand.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrateLock)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS gateway_schema_version (
			version    int PRIMARY KEY,
			applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return err
		}
		var v int
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM gateway_schema_version`).Scan(&v); err != nil {
			return err
		}
		latest := len(migrations) - 1
		if v > latest {
			return fmt.Errorf("the database's gateway tables are version %d, newer than this gateway knows (%d): run the newer gateway, or upgrade this one", v, latest)
		}
		for next := v + 1; next <= latest; next++ {
			if _, err := tx.Exec(ctx, migrations[next]); err != nil {
				return fmt.Errorf("schema version %d: %w", next, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO gateway_schema_version (version) VALUES ($1)`, next); err != nil {
				return err
			}
		}
		return nil
	})
}
