package cluster

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"gateway/channels"
)

// Budget is a send rate shared by every process on the database (Telegram's per-bot
// limit): a token bucket in one row of gateway_send_budget, refilled by the database's own
// clock, so that the processes' clocks need not agree.
type Budget struct {
	p     *Postgres
	name  string
	rate  float64
	burst int
}

var _ channels.Budget = (*Budget)(nil)

// Budget returns the shared bucket name, refilled at perSecond up to burst tokens.
func (p *Postgres) Budget(name string, perSecond float64, burst int) channels.Budget {
	return &Budget{p: p, name: name, rate: perSecond, burst: max(1, burst)}
}

// budgetCall bounds one round trip of Take: a send waits for the budget, not for an
// unanswering database.
const budgetCall = 2 * time.Second

// budgetMaxWait bounds one wait for the next token before asking again: tokens another
// process did not use, or a changed rate, are seen soon.
const budgetMaxWait = time.Second

// refill is the bucket's tokens now: refilled by the time elapsed since updated_at (never
// negative, should a concurrent update have moved updated_at past this statement's clock),
// at most burst. $2 is burst, $3 the rate.
const refill = `least($2::float8, tokens + $3::float8 * greatest(0, extract(epoch FROM clock_timestamp() - updated_at)::float8))`

// Take blocks until the bucket gave this process one token, or ctx ends. One UPDATE
// refills and takes atomically (the row lock orders processes taking together). When the
// database cannot be asked, the send goes: each process still keeps its own pace (the
// Sender's Global), and the platform's own 429 and retry_after still hold; a send refused
// for Postgres being away would lose answers.
func (b *Budget) Take(ctx context.Context) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		wait, err := b.try(ctx)
		if err != nil {
			return ctx.Err() // nil: the send goes (see above)
		}
		if wait == 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		// Jitter, so that processes waiting for the same token do not all ask at once.
		wait = min(wait, budgetMaxWait)
		wait += rand.N(wait/4 + time.Millisecond)
		if !channels.Sleep(ctx, wait) {
			return ctx.Err()
		}
	}
}

// try takes a token (0) or says how long until the next one. The round trip is not cut
// short by ctx (an optional send asks with a deadline of milliseconds): a query cancelled
// mid-flight costs the pool its connection, and a token taken is a send that may go.
func (b *Budget) try(ctx context.Context) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), budgetCall)
	defer cancel()
	var left float64
	err := b.p.pool.QueryRow(ctx, `UPDATE gateway_send_budget SET tokens = `+refill+` - 1, updated_at = clock_timestamp()
		WHERE name = $1 AND `+refill+` >= 1 RETURNING tokens`, b.name, float64(b.burst), b.rate).Scan(&left)
	if err == nil {
		return 0, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return 0, err
	}
	var now float64
	err = b.p.pool.QueryRow(ctx, `SELECT `+refill+` FROM gateway_send_budget WHERE name = $1`, b.name, float64(b.burst), b.rate).Scan(&now)
	if errors.Is(err, pgx.ErrNoRows) {
		// The first take of this name: a full bucket. A process creating it at the same
		// time wins; this one then takes from it.
		_, err = b.p.pool.Exec(ctx, `INSERT INTO gateway_send_budget (name, tokens, updated_at) VALUES ($1, $2, clock_timestamp())
			ON CONFLICT (name) DO NOTHING`, b.name, float64(b.burst))
		if err != nil {
			return 0, err
		}
		return b.try(ctx)
	}
	if err != nil {
		return 0, err
	}
	if b.rate <= 0 {
		return budgetMaxWait, nil
	}
	return max(time.Duration((1-now)/b.rate*float64(time.Second)), time.Millisecond), nil
}
