package slack

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	slackgo "github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
)

// maxEventBody bounds an Events API request body; Slack's events are a few KB.
const maxEventBody = 1 << 20

// Routes serves EventsPath and CommandsPath in events mode; in socket mode it adds nothing.
func (c *Channel) Routes(mux *http.ServeMux) {
	if c.cfg.mode() != ModeEvents {
		return
	}
	mux.HandleFunc("POST "+EventsPath, c.serveEvents)
	mux.HandleFunc("POST "+CommandsPath, c.serveCommands)
}

// readSigned reads a request body of at most maxEventBody bytes and checks Slack's
// signature on it; when it reports false, it has answered the request.
func (c *Channel) readSigned(w http.ResponseWriter, r *http.Request, what string) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxEventBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
			return nil, false
		}
		http.Error(w, "cannot read the request body", http.StatusBadRequest)
		return nil, false
	}
	sv, err := slackgo.NewSecretsVerifier(r.Header, c.cfg.SigningSecret.Reveal())
	if err == nil {
		_, _ = sv.Write(body)
		err = sv.Ensure()
	}
	if err != nil {
		c.log.Warn("slack: rejected a "+what+" request with a missing or bad signature", "remote", r.RemoteAddr, "err", err)
		http.Error(w, "invalid signature", http.StatusUnauthorized)
		return nil, false
	}
	return body, true
}

// serveEvents takes one Events API request: the signature is checked, url_verification
// is answered, and an event callback is answered 200 only once the gateway took the
// message, so that Slack retries it otherwise. A retry (X-Slack-Retry-Num) of an event
// already taken is answered 200 without delivering it again.
func (c *Channel) serveEvents(w http.ResponseWriter, r *http.Request) {
	body, ok := c.readSigned(w, r, "Events API")
	if !ok {
		return
	}
	var outer struct {
		Type      string `json:"type"`
		Challenge string `json:"challenge"`
	}
	if err := json.Unmarshal(body, &outer); err != nil {
		http.Error(w, "the body is not JSON", http.StatusBadRequest)
		return
	}
	switch outer.Type {
	case slackevents.URLVerification:
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"challenge": outer.Challenge})
		return
	case slackevents.CallbackEvent:
	default:
		w.WriteHeader(http.StatusOK) // app_rate_limited and the like: nothing to do
		return
	}
	runCtx, ok := c.life.Enter() // Stop waits for the request
	if !ok {
		http.Error(w, "not ready", http.StatusServiceUnavailable)
		return
	}
	defer c.life.Leave()
	var cb slackevents.EventsAPICallbackEvent
	if err := json.Unmarshal(body, &cb); err != nil {
		http.Error(w, "bad event_callback", http.StatusBadRequest)
		return
	}
	if n := r.Header.Get("X-Slack-Retry-Num"); n != "" {
		c.log.Debug("slack: Events API retry", "event_id", cb.EventID, "retry", n, "reason", r.Header.Get("X-Slack-Retry-Reason"))
	}
	// The request ends the work when Slack hangs up, and so does Stop.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(runCtx, cancel)
	defer stop()
	if err := c.handleCallback(ctx, &cb); err != nil {
		c.log.Warn("slack: event not taken; Slack will retry it", "event_id", cb.EventID, "err", c.scrub.Wrap(err))
		http.Error(w, "not taken; retry later", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}
