package slack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	slackgo "github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
	"github.com/slack-go/slack/socketmode"

	"gateway/channels"
)

const ackTimeout = 5 * time.Second

var errConnLost = errors.New("slack: Socket Mode connection lost; reconnecting")

// runSocket keeps a Socket Mode connection until ctx ends. slack-go reconnects on its own
// after drops and `disconnect` requests; when its client gives up, a new one is made after
// a backoff. ready gets the outcome of the first connection: nil, or an error for Start.
func (c *Channel) runSocket(ctx context.Context, ready chan<- error) {
	backoff := time.Second
	for ctx.Err() == nil {
		smc := socketmode.New(c.api, socketmode.OptionLog(libLog{c}), socketmode.OptionReadLimit(4<<20))
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- smc.RunContext(runCtx) }() // ends with runCtx; awaited below
		err := c.consume(runCtx, smc, done, &ready)
		cancel()
		if fe, ok := errors.AsType[firstConnError](err); ok {
			<-done // the client ends with runCtx
			err = fe.err
		}
		if ctx.Err() != nil {
			return
		}
		code := slackError(err)
		if ready != nil {
			// The first connection failed: tell Start (the gateway tries again when it may pass).
			switch code {
			case "invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired":
				ready <- channels.Permanent(fmt.Errorf("slack: the app token was rejected (%s); check channels.slack.app_token", code))
			default:
				ready <- refusal(err, fmt.Errorf("slack: cannot open a Socket Mode connection: %w", c.scrub.Wrap(err)))
			}
			return
		}
		c.setUp(false, c.scrub.Wrap(err))
		c.log.Warn("slack: Socket Mode client stopped; starting again", "err", c.scrub.Wrap(err), "in", backoff)
		if !channels.Sleep(ctx, backoff) {
			return
		}
		backoff = min(backoff*2, 5*time.Minute)
	}
}

// firstConnError is consume's error when the first connection attempt failed; the client
// is still running until its context is cancelled.
type firstConnError struct{ err error }

func (e firstConnError) Error() string { return e.err.Error() }

// consume handles the client's events until RunContext returns, and returns its error.
func (c *Channel) consume(ctx context.Context, smc *socketmode.Client, done <-chan error, ready *chan<- error) error {
	for {
		select {
		case err := <-done:
			if err == nil {
				err = errors.New("socket mode client ended")
			}
			return err
		case evt := <-smc.Events:
			switch evt.Type {
			case socketmode.EventTypeConnecting:
				c.setUp(false, errConnLost)
			case socketmode.EventTypeConnectionError:
				if e, ok := evt.Data.(*slackgo.ConnectionErrorEvent); ok {
					if *ready != nil {
						// Start's connection: Start fails with why rather than wait out the
						// client's backoff (up to minutes); the gateway tries again.
						return firstConnError{e.ErrorObj}
					}
					c.mu.Lock()
					c.connErr = c.scrub.Wrap(e.ErrorObj)
					c.mu.Unlock()
					c.log.Warn("slack: Socket Mode connection failed; retrying", "err", c.scrub.Wrap(e.ErrorObj), "in", e.Backoff)
				}
			case socketmode.EventTypeConnected:
				c.log.Info("slack: Socket Mode connected")
				c.setUp(true, nil)
				if *ready != nil {
					*ready <- nil
					*ready = nil
				}
			case socketmode.EventTypeEventsAPI:
				c.onEventsAPI(ctx, smc, evt)
			case socketmode.EventTypeSlashCommand:
				c.onSlashEnvelope(ctx, smc, evt)
			case socketmode.EventTypeInteractive:
				// Not used by the gateway; acknowledged so that Slack does not resend them.
				if evt.Request != nil {
					c.ack(ctx, smc, evt.Request.EnvelopeID, nil)
				}
			case socketmode.EventTypeErrorBadMessage:
				c.onBadMessage(ctx, smc, evt)
			case socketmode.EventTypeIncomingError, socketmode.EventTypeErrorWriteFailed:
				c.log.Debug("slack: Socket Mode read/write problem", "type", evt.Type)
			}
		}
	}
}

// onEventsAPI handles one envelope and acknowledges it only once the gateway took the
// message (or the adapter decided to drop it), so that a failed delivery is resent by Slack.
func (c *Channel) onEventsAPI(ctx context.Context, smc *socketmode.Client, evt socketmode.Event) {
	if evt.Request == nil {
		return
	}
	api, _ := evt.Data.(slackevents.EventsAPIEvent)
	cb, _ := api.Data.(*slackevents.EventsAPICallbackEvent)
	if evt.Request.RetryAttempt > 0 {
		c.log.Debug("slack: envelope redelivered", "envelope", evt.Request.EnvelopeID, "retry", evt.Request.RetryAttempt, "reason", evt.Request.RetryReason)
	}
	if err := c.handleCallback(ctx, cb); err != nil {
		c.log.Warn("slack: event not taken; Slack will send it again", "err", c.scrub.Wrap(err))
		return
	}
	c.ack(ctx, smc, evt.Request.EnvelopeID, nil)
}

// onBadMessage acknowledges an envelope slack-go could not parse (an event type it does
// not know): it can never be handled, and unacked it would come back again and again.
func (c *Channel) onBadMessage(ctx context.Context, smc *socketmode.Client, evt socketmode.Event) {
	bad, ok := evt.Data.(*socketmode.ErrorBadMessage)
	if !ok {
		return
	}
	var env struct {
		EnvelopeID string `json:"envelope_id"`
	}
	if json.Unmarshal(bad.Message, &env) == nil && env.EnvelopeID != "" {
		c.log.Debug("slack: acknowledged an envelope slack-go cannot parse", "err", bad.Cause)
		c.ack(ctx, smc, env.EnvelopeID, nil)
	}
}

// onSlashEnvelope hands a slash command to the gateway and acknowledges it, with a private
// answer when the command was not taken. A command is acknowledged either way: Slack does
// not send it again, and the user would only see an error.
func (c *Channel) onSlashEnvelope(ctx context.Context, smc *socketmode.Client, evt socketmode.Event) {
	if evt.Request == nil {
		return
	}
	var payload any
	if cmd, ok := evt.Data.(slackgo.SlashCommand); ok {
		if reply := c.onSlash(ctx, cmd); reply != "" {
			payload = ephemeralPayload(reply)
		}
	}
	c.ack(ctx, smc, evt.Request.EnvelopeID, payload)
}

func (c *Channel) ack(ctx context.Context, smc *socketmode.Client, envelopeID string, payload any) {
	ctx, cancel := context.WithTimeout(ctx, ackTimeout)
	defer cancel()
	if err := smc.AckCtx(ctx, envelopeID, payload); err != nil {
		c.log.Warn("slack: could not acknowledge an envelope", "envelope", envelopeID, "err", c.scrub.Wrap(err))
	}
}
