package cluster

import "time"

// SetClock makes p read the time from now.
func SetClock(p *Postgres, now func() time.Time) { p.now = now }
