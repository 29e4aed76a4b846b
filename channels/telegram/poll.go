package telegram

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-telegram/bot"
	"github.com/go-telegram/bot/models"
)

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
	offset := c.loadOffset()
	failures := 0
	for ctx.Err() == nil {
		progress.Store(time.Now().UnixNano())
		updates, err := c.getUpdates(ctx, offset)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			wait := min(time.Duration(1<<min(failures-1, 5))*time.Second, 30*time.Second)
			var ae *apiError
			if errors.As(err, &ae) && ae.retryAfter > 0 {
				wait = time.Duration(ae.retryAfter) * time.Second
			}
			switch {
			case errors.Is(err, bot.ErrorConflict):
				c.log.Error("telegram: getUpdates conflict: another process is polling with this token, or a webhook is set", "err", err)
			case errors.Is(err, bot.ErrorUnauthorized):
				c.log.Error("telegram: the bot token was rejected (401 Unauthorized); check channels.telegram.token")
			default:
				c.log.Warn("telegram: getUpdates failed", "err", err, "retry_in", wait)
			}
			if failures == 3 {
				c.setConnected(false, err)
			}
			if !sleep(ctx, wait) {
				return
			}
			continue
		}
		if failures > 0 {
			c.setConnected(true, nil)
		}
		failures = 0
		progress.Store(time.Now().UnixNano())
		next := c.handleBatch(ctx, updates, offset, func() { progress.Store(time.Now().UnixNano()) })
		if next != offset {
			offset = next
			if err := c.saveOffset(offset); err != nil {
				c.log.Error("telegram: cannot save the update offset; a restart may repeat updates", "err", err)
			}
		}
		if len(updates) > 0 && next <= updates[len(updates)-1].ID {
			// The gateway refused one: give it a moment before asking again.
			if !sleep(ctx, time.Second) {
				return
			}
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// handleBatch hands a batch over: one goroutine per chat (at most 8 at once) keeps each
// chat's order while chats proceed in parallel; a chat stops at its first update that
// failed. It returns the new offset: past every update when all were handled, else at
// the first failed one, so that it comes again (those after it that were delivered are
// then dropped as redeliveries).
// tick is called after each update handed over: a slow batch that still progresses is not
// a hung one.
func (c *Channel) handleBatch(ctx context.Context, updates []*models.Update, offset int64, tick func()) int64 {
	if len(updates) == 0 {
		return offset
	}
	byChat := map[int64][]*models.Update{}
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
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for _, chat := range order {
		list := byChat[chat]
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			for i, u := range list {
				err := c.safeHandle(ctx, u)
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
				mu.Unlock()
				return
			}
		}()
	}
	wg.Wait()
	ids := make([]int64, 0, len(updates))
	for _, u := range updates {
		ids = append(ids, u.ID)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		if failed[id] {
			return max(id, offset)
		}
	}
	return max(ids[len(ids)-1]+1, offset)
}

// getUpdates makes one long-poll call. The SDK has no exported getUpdates, and its own
// loop spawns a goroutine per update and ignores retry_after, so this is the SDK's wire
// format over our client, with the SDK's types.
func (c *Channel) getUpdates(ctx context.Context, offset int64) ([]*models.Update, error) {
	secs := int(c.opts.PollTimeout / time.Second)
	body, _ := json.Marshal(map[string]any{"offset": offset, "timeout": secs, "allowed_updates": []string{"message"}})
	ctx, cancel := context.WithTimeout(ctx, c.opts.PollTimeout+15*time.Second)
	defer cancel()
	url := strings.TrimRight(c.cfg.APIURL, "/") + "/bot" + c.cfg.Token.Reveal() + "/getUpdates"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, c.scrub.wrap(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.opts.HTTPClient.Do(req)
	if err != nil {
		return nil, c.scrub.wrap(fmt.Errorf("getUpdates: %w", err))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, c.scrub.wrap(fmt.Errorf("getUpdates: reading the answer: %w", err))
	}
	var r struct {
		OK          bool             `json:"ok"`
		Result      []*models.Update `json:"result"`
		ErrorCode   int              `json:"error_code"`
		Description string           `json:"description"`
		Parameters  struct {
			RetryAfter int `json:"retry_after"`
		} `json:"parameters"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, &apiError{msg: fmt.Sprintf("getUpdates: HTTP %d with an answer that is not JSON", resp.StatusCode)}
	}
	if !r.OK {
		e := &apiError{msg: c.scrub.String(fmt.Sprintf("getUpdates: %d %s", r.ErrorCode, r.Description)), retryAfter: r.Parameters.RetryAfter}
		switch r.ErrorCode {
		case http.StatusUnauthorized, http.StatusNotFound:
			e.kind = bot.ErrorUnauthorized
		case http.StatusConflict:
			e.kind = bot.ErrorConflict
		case http.StatusTooManyRequests:
			e.kind = bot.ErrorTooManyRequests
		}
		return nil, e
	}
	return r.Result, nil
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
	var f offsetFile
	if err := json.Unmarshal(b, &f); err != nil || f.BotID != c.bot().ID {
		c.log.Warn("telegram: ignoring a saved update offset that is damaged or of another bot", "path", c.offsetPath())
		return 0
	}
	return f.Offset
}

// saveOffset writes the offset durably: a temp file, fsync, rename.
func (c *Channel) saveOffset(offset int64) error {
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return err
	}
	b, _ := json.Marshal(offsetFile{BotID: c.bot().ID, Offset: offset})
	tmp, err := os.CreateTemp(c.dir, ".offset-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), c.offsetPath())
}
