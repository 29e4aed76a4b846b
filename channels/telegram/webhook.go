package telegram

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"hash/fnv"
	"io"
	"net/http"
	"strconv"
)

// maxWebhookBody bounds one webhook POST; a Telegram update is a few KB.
const maxWebhookBody = 1 << 20

// Routes serves the webhook at WebhookPath in webhook mode; in polling mode it adds nothing.
func (c *Channel) Routes(mux *http.ServeMux) {
	if c.cfg.Mode != ModeWebhook {
		return
	}
	mux.HandleFunc("POST "+WebhookPath, c.serveWebhook)
}

// serveWebhook takes one update from Telegram. It answers 200 only once the update is
// handled (delivered to the gateway, or deliberately dropped); any other answer makes
// Telegram send it again.
func (c *Channel) serveWebhook(w http.ResponseWriter, r *http.Request) {
	got := r.Header.Get("X-Telegram-Bot-Api-Secret-Token")
	if subtle.ConstantTimeCompare([]byte(got), []byte(c.cfg.WebhookSecret.Reveal())) != 1 {
		c.log.Warn("telegram: webhook POST with a wrong secret token refused", "remote", r.RemoteAddr)
		http.Error(w, "wrong secret token", http.StatusUnauthorized)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxWebhookBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, "update too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "cannot read the update", http.StatusBadRequest)
		return
	}
	if !json.Valid(body) {
		c.log.Warn("telegram: webhook POST whose body is not JSON refused", "remote", r.RemoteAddr, "bytes", len(body))
		http.Error(w, "the body is not a Telegram update", http.StatusBadRequest)
		return
	}
	// An update the adapter cannot read is acknowledged, logged, and skipped: refused,
	// Telegram would send it again and again, with every later update behind it.
	u := c.decodeUpdate(body)
	if u == nil {
		w.WriteHeader(http.StatusOK)
		return
	}
	life, ok := c.life.Enter()
	if !ok {
		http.Error(w, "not running", http.StatusServiceUnavailable)
		return
	}
	defer c.life.Leave()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(life, cancel) // Stop ends the request's work too
	defer stop()

	// Telegram may POST several updates at once; one chat's are handled in order.
	a, err := c.handleInOrder(ctx, u)
	if err == nil && a != nil {
		// An album's item is answered once the whole album was delivered; the chat's
		// next items are taken meanwhile.
		err = a.wait(ctx)
	}
	if err != nil {
		c.log.Warn("telegram: webhook update not handed over; Telegram will send it again", "update", u.ID, "err", err)
		http.Error(w, "not taken; send again", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// handleInOrder takes u while holding its chat's stripe.
func (c *Channel) handleInOrder(ctx context.Context, u *update) (*album, error) {
	if u.Message != nil {
		h := fnv.New32a()
		h.Write([]byte(strconv.FormatInt(u.Message.Chat.ID, 10)))
		mu := &c.stripes[h.Sum32()%uint32(len(c.stripes))]
		mu.Lock()
		defer mu.Unlock()
	}
	return c.safeHandle(ctx, u)
}
