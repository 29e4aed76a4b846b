package telegram

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/go-telegram/bot"
)

// The calls made on every answer and carrying no file (sendChatAction, sendMessage,
// editMessageText, deleteMessage) go as JSON bodies over the gateway's HTTP client, with the
// SDK's parameter types and errors. The SDK sends every call as multipart/form-data written
// through an io.Pipe by a goroutine of its own: a streamed, chunked body whose every part
// is a hand-over between two goroutines, a random boundary and a reflection walk of the
// parameters, and it decodes a whole Message for an id. The Bot API takes JSON for any
// call without a file upload. Uploads (voice, photo) and the calls made once at start stay
// on the SDK.

// sendMessage sends a message and returns its id.
func (c *Channel) sendMessage(ctx context.Context, p *bot.SendMessageParams) (int, error) {
	var m struct {
		ID int `json:"message_id"`
	}
	err := c.callJSON(ctx, "sendMessage", p, &m)
	return m.ID, err
}

func (c *Channel) editMessageText(ctx context.Context, p *bot.EditMessageTextParams) error {
	return c.callJSON(ctx, "editMessageText", p, nil)
}

func (c *Channel) sendChatAction(ctx context.Context, p *bot.SendChatActionParams) error {
	return c.callJSON(ctx, "sendChatAction", p, nil)
}

func (c *Channel) deleteMessage(ctx context.Context, p *bot.DeleteMessageParams) error {
	return c.callJSON(ctx, "deleteMessage", p, nil)
}

// callJSON makes one Bot API call with params as its JSON body and decodes the result into
// dest (when not nil). Failures are the SDK's errors for the same answers, so that
// classify and the callers treat them alike.
func (c *Channel) callJSON(ctx context.Context, method string, params, dest any) error {
	body, err := json.Marshal(params)
	if err != nil {
		return fmt.Errorf("error encode request for method %s, %w", method, err)
	}
	u := strings.TrimRight(c.cfg.APIURL, "/") + "/bot" + c.cfg.Token.Reveal() + "/" + method
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("error create request for method %s, %w", method, c.scrub.Wrap(err))
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.opts.HTTPClient.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			ue.URL = strings.ReplaceAll(ue.URL, c.cfg.Token.Reveal(), "***")
		}
		return fmt.Errorf("error do request for method %s, %w", method, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("error read response body for method %s, %w", method, err)
	}
	var r struct {
		OK          bool            `json:"ok"`
		Result      json.RawMessage `json:"result"`
		Description string          `json:"description"`
		ErrorCode   int             `json:"error_code"`
		Parameters  struct {
			RetryAfter      int   `json:"retry_after"`
			MigrateToChatID int64 `json:"migrate_to_chat_id"`
		} `json:"parameters"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("error decode response body for method %s (HTTP %d), %w", method, resp.StatusCode, err)
	}
	if !r.OK {
		return apiFailure(method, r.ErrorCode, r.Description, r.Parameters.RetryAfter, r.Parameters.MigrateToChatID)
	}
	if dest != nil {
		if err := json.Unmarshal(r.Result, dest); err != nil {
			return fmt.Errorf("error decode response result for method %s, %w", method, err)
		}
	}
	return nil
}

// apiFailure is the SDK's error for a refused call.
func apiFailure(method string, code int, desc string, retryAfter int, migrateTo int64) error {
	switch code {
	case http.StatusForbidden:
		return fmt.Errorf("%w, %s", bot.ErrorForbidden, desc)
	case http.StatusBadRequest:
		if migrateTo != 0 {
			return &bot.MigrateError{Message: fmt.Sprintf("%s: %s", bot.ErrorBadRequest, desc), MigrateToChatID: int(migrateTo)}
		}
		return fmt.Errorf("%w, %s", bot.ErrorBadRequest, desc)
	case http.StatusUnauthorized:
		return fmt.Errorf("%w, %s", bot.ErrorUnauthorized, desc)
	case http.StatusNotFound:
		return fmt.Errorf("%w, %s", bot.ErrorNotFound, desc)
	case http.StatusConflict:
		return fmt.Errorf("%w, %s", bot.ErrorConflict, desc)
	case http.StatusTooManyRequests:
		return &bot.TooManyRequestsError{Message: fmt.Sprintf("%s, %s", bot.ErrorTooManyRequests, desc), RetryAfter: retryAfter}
	default:
		return fmt.Errorf("error response from telegram for method %s, %d %s", method, code, desc)
	}
}
