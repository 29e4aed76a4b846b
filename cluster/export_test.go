package cluster

import "time"

// SetClock makes p read the time from now.
func SetClock(p *Postgres, now func() time.Time) { p.now = now }

// RememberedCount is the number of keys set holds, live or not yet pruned.
func RememberedCount(p *Postgres, set string) int {
	ctx, cancel := p.ctx()
	defer cancel()
	var n int
	if err := p.pool.QueryRow(ctx, `SELECT count(*) FROM gateway_remembered WHERE "set" = $1`, set).Scan(&n); err != nil {
		panic(err)
	}
	return n
}
