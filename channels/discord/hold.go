package discord

import (
	"context"
	"time"

	"gateway/channels"
)

// Discord allows one gateway session per token and shard: in cluster mode the session is
// held by one process through Options.Holder, and the others only send (REST works
// anywhere). The holder receives every event, interactions included, so only it answers
// application commands.

// drainWait bounds how long a process giving up the connection waits for the messages its
// session already delivered to be handled before it stores the cursors.
const drainWait = 10 * time.Second

// holdLoop connects the gateway while this process holds "conn.discord.<bot id>": it asks
// for the hold (Hold blocks while another process has it), opens the session, runs it with
// the usual reconnects while held, and when the hold ends closes the session at once and
// asks again. A gateway that refuses for good ends it, as it ends supervise without a
// Holder.
func (c *Channel) holdLoop(ctx context.Context) {
	name := "conn.discord." + c.bot()
	for ctx.Err() == nil {
		held, release, err := c.held.Hold(ctx, name)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			c.log.Warn("discord: cannot take the gateway connection hold; retrying", "err", err)
			if !channels.Sleep(ctx, time.Second) {
				return
			}
			continue
		}
		c.held.Set(true)
		gaveUp := !c.runHeld(held) && held.Err() == nil
		c.leave(ctx)
		release()
		if gaveUp || ctx.Err() != nil {
			return
		}
		c.held.Set(false)
		if c.down.Swap(false) {
			c.sink.Connected(Name, true, nil) // not connected, but sending: ready
		}
	}
}

// runHeld opens the session and keeps it up, reconnecting, until held ends (true) or the
// gateway refuses for good (false, with held not ended).
func (c *Channel) runHeld(held context.Context) bool {
	// Another process may have had the connection: with State, what was posted since the
	// stored cursors is read once READY comes. Without, this process's cursors are stale
	// and reading from them would repeat what the other process answered.
	c.gap.Store(c.state != nil)
	select {
	case <-c.lost: // from closing the previous session
	default:
	}
	if !c.reconnect(held, 0) {
		return false
	}
	c.supervise(held)
	return held.Err() != nil
}

// leave closes the session at once, lets the work loop handle what the session delivered
// (new messages can no longer come), and stores the cursors for the next holder. On Stop
// (ctx ended) it waits for the work loop to end instead.
func (c *Channel) leave(ctx context.Context) {
	c.disconnect()
	select {
	case <-c.lost:
	default:
	}
	if ctx.Err() != nil {
		<-c.workDone
	} else {
		wctx, cancel := context.WithTimeout(ctx, drainWait)
		done := make(chan struct{})
		select {
		case c.inbox <- inbound{done: done}:
			select {
			case <-done:
			case <-wctx.Done():
			}
		case <-wctx.Done():
		}
		cancel()
	}
	if c.flush() {
		c.forget()
	}
}
