package slacktest

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// Delivery is one HTTP request of the Events API the fake made to the app.
type Delivery struct {
	EventID  string
	RetryNum int // X-Slack-Retry-Num; 0 for the first attempt
	Status   int // 0 when the request failed or timed out
	Time     time.Time
}

type httpState struct {
	target     string
	timeout    time.Duration
	retryDelay time.Duration
	deliveries []Delivery
}

func (h *httpState) setup() {
	h.timeout = 3 * time.Second // Slack's own wait for an answer
	h.retryDelay = 100 * time.Millisecond
}

// DeliverTo switches the fake from Socket Mode to the Events API: every injected event is
// POSTed to url, signed with SigningSecret; a non-200 answer or no answer within the HTTP
// timeout is retried up to three times with X-Slack-Retry-Num and X-Slack-Retry-Reason.
func (s *Server) DeliverTo(url string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.httpEvents.target = url
}

// SetHTTPTimeout sets how long the fake waits for the app's answer before it retries (default 3s).
func (s *Server) SetHTTPTimeout(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.httpEvents.timeout = d
}

// Deliveries lists the Events API requests made so far, oldest first.
func (s *Server) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Delivery(nil), s.httpEvents.deliveries...)
}

// Sign returns the headers Slack signs a request body with at time at.
func Sign(secret string, body []byte, at time.Time) http.Header {
	ts := strconv.FormatInt(at.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "v0:%s:", ts)
	mac.Write(body)
	h := http.Header{}
	h.Set("X-Slack-Request-Timestamp", ts)
	h.Set("X-Slack-Signature", "v0="+hex.EncodeToString(mac.Sum(nil)))
	h.Set("Content-Type", "application/json")
	return h
}

// Post sends body to url with header and returns the status and answer.
func Post(ctx context.Context, url string, body []byte, header http.Header) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header = header
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b), nil
}

// deliverHTTP posts one event callback until the app answers 200 or the retries run out,
// starting at retry number first. Call with mu held; it starts its own goroutine.
func (s *Server) deliverHTTP(eventID string, payload json.RawMessage, first int) {
	target, timeout, delay := s.httpEvents.target, s.httpEvents.timeout, s.httpEvents.retryDelay
	if s.ctx.Err() != nil {
		return
	}
	s.fs.Go(func(context.Context) {
		client := &http.Client{Timeout: timeout}
		reason := "http_timeout" // for a redelivery: Slack did not see the first answer
		for retry := first; retry <= 3; retry++ {
			h := Sign(SigningSecret, payload, time.Now())
			if retry > 0 {
				h.Set("X-Slack-Retry-Num", strconv.Itoa(retry))
				h.Set("X-Slack-Retry-Reason", reason)
			}
			req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, target, bytes.NewReader(payload))
			if err != nil {
				return
			}
			req.Header = h
			status := 0
			resp, err := client.Do(req)
			if err == nil {
				io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
				resp.Body.Close()
				status = resp.StatusCode
				reason = "http_error"
			} else {
				reason = "http_timeout"
			}
			s.mu.Lock()
			s.httpEvents.deliveries = append(s.httpEvents.deliveries, Delivery{EventID: eventID, RetryNum: retry, Status: status, Time: time.Now()})
			s.mu.Unlock()
			if status == http.StatusOK || s.ctx.Err() != nil {
				return
			}
			t := time.NewTimer(delay)
			select {
			case <-s.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	})
}
