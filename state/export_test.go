package state

import "time"

// SetClock makes db read the time from now (the behaviour suite's clock).
func SetClock(db *DB, now func() time.Time) { db.now = now }
