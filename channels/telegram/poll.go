package telegram

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-telegram/bot"

	"gateway/channels"
)

// pollWhileHeld polls: at once without a Holder; with one (cluster mode) only while this
// process holds "conn.telegram.<bot id>", since Telegram allows one getUpdates per token.
// Without the hold it keeps asking for it (Hold blocks) and goes on sending; when the hold
// is lost polling stops at once (its context is the hold's) and it asks again.
func (c *Channel) pollWhileHeld(ctx context.Context) {
	if c.opts.Holder == nil {
		c.superviseLongPolling(ctx)
		return
	}
	name := "conn.telegram." + strconv.FormatInt(c.bot().ID, 10)
	for ctx.Err() == nil {
		held, release, err := c.held.Hold(ctx, name)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			c.log.Warn("telegram: cannot take the polling hold; retrying", "err", err)
			if !channels.Sleep(ctx, time.Second) {
				return
			}
			continue
		}
		c.held.Set(true)
		c.superviseLongPolling(held)
		release()
		if ctx.Err() == nil {
			c.held.Set(false)
		}
	}
}

// superviseLongPolling runs the poll loop and restarts it when it stops completing
// getUpdates rounds for longer than Options.Watchdog (a hung connection, a stuck hand-over).
func (c *Channel) superviseLongPolling(ctx context.Context) {
	for ctx.Err() == nil {
		loopCtx, cancel := context.WithCancel(ctx)
		var progress atomic.Int64
		progress.Store(time.Now().UnixNano())
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.pollLoop(loopCtx, &progress)
		}()
		tick := time.NewTicker(max(c.opts.Watchdog/4, 10*time.Millisecond))
	watch:
		for {
			select {
			case <-ctx.Done():
				break watch
			case <-done:
				break watch
			case <-tick.C:
				if stale := time.Since(time.Unix(0, progress.Load())); stale > c.opts.Watchdog {
					c.log.Warn("telegram: polling made no progress; restarting it", "stalled_for", stale.Round(time.Millisecond))
					break watch
				}
			}
		}
		tick.Stop()
		cancel()
		<-done
	}
}

// pollLoop fetches updates with getUpdates and hands them over, advancing and saving the
// offset only past updates the gateway took.
func (c *Channel) pollLoop(ctx context.Context, progress *atomic.Int64) {
	offset, saved := c.openSavedOffset()
	defer saved.close()
	failures := 0
	for ctx.Err() == nil {
		asked := time.Now()
		progress.Store(asked.UnixNano())
		updates, err := c.getUpdates(ctx, offset)
		if err == nil && len(updates) == 0 && time.Since(asked) < c.opts.PollTimeout/2 {
			// Nothing, and at once: the server does not hold the call until an update comes
			// (a Bot API stand-in). Asked again at once, it would be asked without end.
			if !channels.Sleep(ctx, emptyPollPause) {
				return
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			wait := pollBackoff(failures)
			var ae *apiError
			if errors.As(err, &ae) && ae.retryAfter > 0 {
				wait = time.Duration(ae.retryAfter) * time.Second
			}
			switch {
			case errors.Is(err, bot.ErrorConflict):
				c.log.Error("telegram: getUpdates conflict: another process is polling with this token, or a webhook is set", "err", err)
			case errors.Is(err, bot.ErrorUnauthorized), errors.Is(err, bot.ErrorNotFound): // 404: a malformed token
				c.log.Error("telegram: the bot token was rejected (401 Unauthorized); check channels.telegram.token")
			default:
				c.log.Warn("telegram: getUpdates failed", "err", err, "retry_in", wait)
			}
			if failures == 3 {
				c.setConnected(false, err)
			}
			if !channels.Sleep(ctx, wait) {
				return
			}
			continue
		}
		if failures > 0 {
			c.setConnected(true, nil)
		}
		failures = 0
		progress.Store(time.Now().UnixNano())
		next, refused := c.handleBatch(ctx, updates, offset, func() { progress.Store(time.Now().UnixNano()) })
		if next != offset {
			offset = next
			if err := saved.save(offset); err != nil {
				c.log.Error("telegram: cannot save the update offset; a restart may repeat updates", "err", err)
			}
		}
		if len(updates) > 0 && next <= updates[len(updates)-1].ID {
			// The gateway refused one: give it a moment before asking again. An album
			// being gathered holds the offset too, but its next items must come soon.
			wait := 100 * time.Millisecond
			if refused {
				wait = time.Second
			}
			if !channels.Sleep(ctx, wait) {
				return
			}
		}
	}
}

// emptyPollPause is the wait after an empty answer that came back at once, which
// Telegram's long poll never gives: at most four calls a second to a server that does.
const emptyPollPause = 250 * time.Millisecond

// Poll retries back off from pollBackoffBase, doubling up to pollBackoffMax: after an
// outage, messages sent during it are fetched within a few seconds of Telegram's return
// (an uncapped doubling had reached 16 s after a 13 s outage).
const (
	pollBackoffBase = 500 * time.Millisecond
	pollBackoffMax  = 4 * time.Second
)

// pollBackoff is the wait after the n-th failure in a row, with jitter so that many bots
// behind one proxy do not retry in step.
func pollBackoff(n int) time.Duration {
	d := min(pollBackoffBase<<min(n-1, 10), pollBackoffMax)
	return d/2 + rand.N(d/2+1)
}

// handleBatch hands a batch over: one goroutine per chat (at most 8 at once; a batch of
// one chat is handled on the caller's) keeps each chat's order while chats proceed in
// parallel; a chat stops at its first update that failed. Nothing here waits on a download: media go as references (Fetch downloads them
// on the gateway's side). It returns the new offset: past every update when all were
// handled, else at the first failed one or the first item of an album still gathered, so
// that it comes again (those after it that were delivered are then dropped as
// redeliveries); refused reports a failed one.
// tick is called after each update handed over: a slow batch that still progresses is not
// a hung one.
func (c *Channel) handleBatch(ctx context.Context, updates []*update, offset int64, tick func()) (next int64, refused bool) {
	if len(updates) == 0 {
		return offset, false
	}
	byChat := map[int64][]*update{}
	var order []int64
	for _, u := range updates {
		var chat int64
		if u.Message != nil {
			chat = u.Message.Chat.ID
		}
		if _, ok := byChat[chat]; !ok {
			order = append(order, chat)
		}
		byChat[chat] = append(byChat[chat], u)
	}
	var mu sync.Mutex
	failed := map[int64]bool{}
	handle := func(list []*update) {
		for i, u := range list {
			a, err := c.safeHandle(ctx, u)
			if err == nil && a != nil {
				if done, aerr := a.settled(); !done {
					// An album being gathered: acknowledged once it is delivered.
					mu.Lock()
					failed[u.ID] = true
					mu.Unlock()
					tick()
					continue
				} else {
					err = aerr
				}
			}
			if err == nil {
				tick()
				continue
			}
			if ctx.Err() == nil {
				c.log.Warn("telegram: update not handed over; it will come again", "update", u.ID, "err", err)
			}
			mu.Lock()
			for _, v := range list[i:] {
				failed[v.ID] = true
			}
			refused = true
			mu.Unlock()
			return
		}
	}
	if len(order) == 1 {
		// The usual batch, one chat: handled here, without a goroutine to start and a
		// fresh stack to grow (the journal's encoding takes it past its first size).
		handle(byChat[order[0]])
	} else {
		sem := make(chan struct{}, 8)
		var wg sync.WaitGroup
		for _, chat := range order {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				handle(byChat[chat])
			})
		}
		wg.Wait()
	}
	ids := make([]int64, 0, len(updates))
	for _, u := range updates {
		ids = append(ids, u.ID)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		if failed[id] {
			return max(id, offset), refused
		}
	}
	return max(ids[len(ids)-1]+1, offset), refused
}

// getUpdates makes one long-poll call. The SDK has no exported getUpdates, and its own
// loop spawns a goroutine per update and ignores retry_after, so this is the SDK's wire
// format over our client (callJSON), decoded into the adapter's update (update.go).
func (c *Channel) getUpdates(ctx context.Context, offset int64) ([]*update, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.PollTimeout+15*time.Second)
	defer cancel()
	params := map[string]any{"offset": offset, "timeout": int(c.opts.PollTimeout / time.Second), "allowed_updates": []string{"message"}}
	var batch json.RawMessage
	if err := c.callJSON(ctx, "getUpdates", params, &batch); err != nil {
		return nil, c.scrub.wrap(err)
	}
	var updates []*update
	if json.Unmarshal(batch, &updates) == nil {
		return updates, nil
	}
	// One update (or more) the adapter cannot read: each is decoded on its own, so that the
	// others still go on.
	var raws []json.RawMessage
	if err := json.Unmarshal(batch, &raws); err != nil {
		return nil, fmt.Errorf("error decode response result for method getUpdates, %w", err)
	}
	updates = make([]*update, 0, len(raws))
	for _, raw := range raws {
		if u := c.decodeUpdate(raw); u != nil {
			updates = append(updates, u)
		}
	}
	if len(updates) == 0 && len(raws) > 0 {
		// Nothing to move the offset past: back off as from a failed call, not spin.
		return nil, fmt.Errorf("telegram: getUpdates returned %d updates without an id it can read", len(raws))
	}
	return updates, nil
}

// decodeUpdate reads one update on its own: decoded with its batch only, one the adapter
// cannot read failed getUpdates as a whole, the offset never moved past it, and every chat
// waited behind it for good. An update it cannot read is logged and kept as its id alone,
// which moves the offset past it; nil when not even the id can be read.
func (c *Channel) decodeUpdate(raw []byte) *update {
	u := new(update)
	err := json.Unmarshal(raw, u)
	if err == nil {
		return u
	}
	var id struct {
		ID int64 `json:"update_id"`
	}
	if json.Unmarshal(raw, &id) != nil || id.ID == 0 {
		c.log.Warn("telegram: skipping an update without an id it can read", "err", err, "bytes", len(raw))
		return nil
	}
	c.log.Warn("telegram: skipping an update it cannot read", "update", id.ID, "err", err)
	return &update{ID: id.ID}
}

// savedOffset is where the poll loop keeps the update offset: the state file's cursor when
// the adapter has a State (Options.State), else a file under StateDir/telegram.
type savedOffset interface {
	save(offset int64) error
	close()
}

// offsetCursor is the cursor's name in State.
const offsetCursor = "telegram.offset"

// openSavedOffset returns the saved offset (0 when none) and where to save the next. With a
// State, an offset file left by an earlier version is moved in once: read, stored as the
// cursor, then removed.
func (c *Channel) openSavedOffset() (int64, savedOffset) {
	st := c.opts.State
	if st == nil {
		offset := c.loadOffset()
		w, err := c.openOffset()
		if err != nil {
			c.log.Error("telegram: cannot open the update offset file; a restart may repeat updates", "err", err)
		}
		return offset, w
	}
	cur := &cursorOffset{c: c, st: st}
	v, ok, err := st.Cursor(offsetCursor)
	if err != nil {
		c.log.Warn("telegram: cannot read the saved update offset; starting from Telegram's", "err", err)
		return 0, cur
	}
	if ok {
		var f offsetFile
		if err := json.Unmarshal([]byte(v), &f); err != nil || f.BotID != c.bot().ID {
			c.log.Warn("telegram: ignoring a saved update offset that is damaged or of another bot")
			return 0, cur
		}
		return f.Offset, cur
	}
	if _, err := os.Stat(c.offsetPath()); err != nil {
		return 0, cur
	}
	offset := c.loadOffset()
	if offset > 0 {
		if err := cur.save(offset); err != nil {
			c.log.Error("telegram: cannot move the update offset file into the state file; keeping the file", "err", err)
			return offset, cur
		}
	}
	if err := os.Remove(c.offsetPath()); err != nil {
		c.log.Warn("telegram: cannot remove the old update offset file", "err", err)
	} else {
		c.log.Info("telegram: moved the update offset from its own file into the state file", "offset", offset)
	}
	return offset, cur
}

// cursorOffset saves the offset as a State cursor, at most once per cursorEvery and when
// polling stops. The bot id is saved with it, as in the file. Each save is a synced write,
// and it used to be one per batch: at low traffic one per message, beside the journal's
// own. The saved offset only matters until the next getUpdates confirms the batch to
// Telegram, milliseconds later; after a crash within cursorEvery Telegram offers at most
// what it had not yet been told, and the journal's dedup window drops what was taken.
type cursorOffset struct {
	c      *Channel
	st     channels.State
	last   time.Time
	unsent int64 // an offset not saved yet; 0 when none
}

const cursorEvery = time.Second

func (w *cursorOffset) save(offset int64) error {
	if time.Since(w.last) < cursorEvery {
		w.unsent = offset
		return nil
	}
	return w.write(offset)
}

func (w *cursorOffset) write(offset int64) error {
	w.unsent, w.last = 0, time.Now()
	b, _ := json.Marshal(offsetFile{BotID: w.c.bot().ID, Offset: offset})
	return w.st.SetCursor(offsetCursor, string(b))
}

func (w *cursorOffset) close() {
	if w.unsent == 0 {
		return
	}
	if err := w.write(w.unsent); err != nil {
		w.c.log.Error("telegram: cannot save the update offset; a restart may repeat updates", "err", err)
	}
}

// offsetFile is the saved update offset. BotID guards against a changed token: another
// bot's offset would skip or repeat updates.
type offsetFile struct {
	BotID  int64 `json:"bot_id"`
	Offset int64 `json:"offset"`
}

func (c *Channel) offsetPath() string { return filepath.Join(c.dir, "offset.json") }

func (c *Channel) loadOffset() int64 {
	b, err := os.ReadFile(c.offsetPath())
	if err != nil {
		if !os.IsNotExist(err) {
			c.log.Warn("telegram: cannot read the saved update offset; starting from Telegram's", "err", err)
		}
		return 0
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return 0 // created, but the process ended before the first save
	}
	var f offsetFile
	if err := json.Unmarshal(b, &f); err != nil || f.BotID != c.bot().ID {
		c.log.Warn("telegram: ignoring a saved update offset that is damaged or of another bot", "path", c.offsetPath())
		return 0
	}
	return f.Offset
}

// offsetRecord is the size of the offset file: the JSON padded with spaces, so that each
// save overwrites the whole record in place.
const offsetRecord = 64

// offsetWriter is the poll loop's handle on the saved offset. Each save is one pwrite of a
// fixed-size record at the start of a file kept open, with no fsync: the saved offset
// only matters until the next getUpdates confirms the batch to Telegram (milliseconds
// later). A crash of the process keeps the write (it is in the page cache); a power cut in
// that window repeats at most that one batch, and a damaged record is ignored on load.
// (It used to be a temp file, fsync and rename per batch: a new inode, a flush and seven
// syscalls for every batch, which at low traffic is every message.)
type offsetWriter struct {
	c   *Channel
	f   *os.File
	rec []byte
}

func (c *Channel) openOffset() (*offsetWriter, error) {
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(c.offsetPath(), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	// A longer file (damaged, or of another format) would keep a tail after the record.
	if fi, err := f.Stat(); err == nil && fi.Size() > offsetRecord {
		if err := f.Truncate(offsetRecord); err != nil {
			f.Close()
			return nil, err
		}
	}
	return &offsetWriter{c: c, f: f, rec: make([]byte, offsetRecord)}, nil
}

func (w *offsetWriter) save(offset int64) error {
	if w == nil {
		return errors.New("the offset file could not be opened")
	}
	b, _ := json.Marshal(offsetFile{BotID: w.c.bot().ID, Offset: offset})
	n := copy(w.rec, b)
	for i := n; i < offsetRecord-1; i++ {
		w.rec[i] = ' '
	}
	w.rec[offsetRecord-1] = '\n'
	_, err := w.f.WriteAt(w.rec, 0)
	return err
}

func (w *offsetWriter) close() {
	if w != nil {
		w.f.Close()
	}
}
