package telegram

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"

	"github.com/go-telegram/bot"
)

// The calls made on every answer (sendChatAction, sendMessage, editMessageText,
// deleteMessage, and the uploads: sendVoice, sendAudio, sendPhoto, sendDocument) go over the
// gateway's HTTP client, with the SDK's parameter types and errors. The SDK sends every call
// as multipart/form-data written through an io.Pipe by a goroutine of its own: a streamed,
// chunked body whose every part is a hand-over between two goroutines, a random boundary and
// a reflection walk of the parameters, and it decodes a whole Message for an id, which makes
// encoding/json build and keep its decoders for every type a Message reaches (~0.4 MB of
// heap for the life of the process). The Bot API takes JSON for any call without a file
// upload; an upload is one multipart body of known length around the file's bytes. The
// calls made once at start, and getFile for a download, stay on the SDK: their results are
// small types.

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
	req, err := c.newRequest(ctx, method, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return c.do(req, method, dest)
}

// callMultipart makes one Bot API call that uploads data as the form file field, named
// name, with params' other fields as the SDK sends them (see multipartForm); its result is
// not read (the sent message's id is never used), only a refusal. The file is not copied:
// the body reads it in place between the form's head and tail, and each call (each attempt
// of a retry) reads it whole again.
func (c *Channel) callMultipart(ctx context.Context, method string, params any, field, name string, data []byte, dest any) error {
	head, tail, ctype, err := multipartForm(params, field, name)
	if err != nil {
		return fmt.Errorf("error build request form for method %s, %w", method, err)
	}
	body := func() io.Reader {
		return io.MultiReader(bytes.NewReader(head), bytes.NewReader(data), bytes.NewReader(tail))
	}
	req, err := c.newRequest(ctx, method, body())
	if err != nil {
		return err
	}
	// Known length, not chunked; GetBody lets net/http send it again on a stale connection.
	req.ContentLength = int64(len(head) + len(data) + len(tail))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(body()), nil }
	req.Header.Set("Content-Type", ctype)
	return c.do(req, method, dest)
}

// multipartForm is the form of an upload but for the file's bytes: head ends with the
// header of the file part field (named name), tail holds the parts after it and the
// closing boundary. Like the SDK's form, each json-tagged field of params (omitempty
// respected) is a part holding its JSON text, strings bare; params' own field named field
// (left nil by the caller) is where the file goes.
func multipartForm(params any, field, name string) (head, tail []byte, ctype string, err error) {
	js, err := json.Marshal(params)
	if err != nil {
		return nil, nil, "", err
	}
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	dec := json.NewDecoder(bytes.NewReader(js))
	if _, err := dec.Token(); err != nil { // the object's '{'
		return nil, nil, "", err
	}
	split := -1
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, "", err
		}
		key, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, "", err
		}
		if key == field {
			if _, err := w.CreateFormFile(field, name); err != nil {
				return nil, nil, "", err
			}
			split = buf.Len()
			continue
		}
		part, err := w.CreateFormField(key)
		if err != nil {
			return nil, nil, "", err
		}
		if len(v) > 0 && v[0] == '"' {
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return nil, nil, "", err
			}
			_, err = io.WriteString(part, s)
		} else {
			_, err = part.Write(v)
		}
		if err != nil {
			return nil, nil, "", err
		}
	}
	if split < 0 {
		return nil, nil, "", fmt.Errorf("the parameters have no field %s for the file", field)
	}
	if err := w.Close(); err != nil {
		return nil, nil, "", err
	}
	b := buf.Bytes()
	return b[:split], b[split:], w.FormDataContentType(), nil
}

// newRequest is a POST of body to method; its URL holds the token, so an error is scrubbed.
func (c *Channel) newRequest(ctx context.Context, method string, body io.Reader) (*http.Request, error) {
	u := strings.TrimRight(c.cfg.APIURL, "/") + "/bot" + c.cfg.Token.Reveal() + "/" + method
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, body)
	if err != nil {
		return nil, fmt.Errorf("error create request for method %s, %w", method, c.scrub.Wrap(err))
	}
	return req, nil
}

// do sends req and decodes the Bot API's answer: the result into dest (when not nil), a
// refusal into the SDK's error for it. The body read is bounded; the token is taken out of
// a failed request's URL.
func (c *Channel) do(req *http.Request, method string, dest any) error {
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
	// One decoding of the answer, the result straight into dest: an envelope holding the
	// result as raw JSON, decoded again, read every answer four times (encoding/json checks
	// the whole input before it decodes it), a few per cent of a message's CPU.
	if dest == nil {
		dest = new(anyResult)
	}
	r := struct {
		OK          bool   `json:"ok"`
		Result      any    `json:"result"` // dest: a pointer, decoded into
		Description string `json:"description"`
		ErrorCode   int    `json:"error_code"`
		Parameters  struct {
			RetryAfter      int   `json:"retry_after"`
			MigrateToChatID int64 `json:"migrate_to_chat_id"`
		} `json:"parameters"`
	}{Result: dest}
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("error decode response body for method %s (HTTP %d), %w", method, resp.StatusCode, err)
	}
	if !r.OK {
		return apiFailure(method, r.ErrorCode, r.Description, r.Parameters.RetryAfter, r.Parameters.MigrateToChatID)
	}
	return nil
}

// anyResult takes a result that is not read (true, or a Message for an edit).
type anyResult struct{}

func (*anyResult) UnmarshalJSON([]byte) error { return nil }

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
