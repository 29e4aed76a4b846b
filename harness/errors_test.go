package harness_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"gateway/harness"
	"gateway/internal/secret"
)

func TestProviderErrorText(t *testing.T) {
	cases := map[string]*harness.ProviderError{
		"The model provider failed (HTTP 500) after 4 attempts. Please try again.":                                                              {Status: 500, Attempts: 4},
		"The model API rejected the API key (HTTP 401). Check llm.api_key.":                                                                     {Status: 401, Attempts: 1},
		"The model API refused access (HTTP 403): Country, region, or territory not supported. Check llm.api_key and what its account may use.": {Status: 403, Message: "Country, region, or territory not supported"},
		"The model API refused access (HTTP 403). Check llm.api_key and what its account may use.":                                              {Status: 403},
		"The model provider did not answer in time after 2 attempts. Please try again.":                                                         {Timeout: true, Attempts: 2},
		"I could not reach the model (network error). Please try again later.":                                                                  {Unreachable: true, Attempts: 1},
		"I could not reach the model (network error) after 3 attempts. Please try again later.":                                                 {Unreachable: true, Attempts: 3},
		"The connection to the model provider failed. Please try again.":                                                                        {Attempts: 1},
		"The model API rejected the request (HTTP 400): bad model.":                                                                             {Status: 400, Message: "bad model"},
		"The model API answered HTTP 404 (check llm.base_url and llm.model): no such model.":                                                    {Status: 404, Message: "no such model"},
		"The model stopped answering midway. Please try again.":                                                                                 {Midway: true, Attempts: 1},
		"I could not reach the model (network error: the name of its server could not be resolved) after 2 attempts. Please try again later.":   {Unreachable: true, DNS: true, Attempts: 2},
	}
	for want, e := range cases {
		if got := e.Error(); got != want {
			t.Errorf("got  %q\nwant %q", got, want)
		}
	}
}

func TestRetryStatusSaysBusyOnlyWhenTheProviderSaidSo(t *testing.T) {
	cases := []struct {
		e    *harness.ProviderError
		want string
	}{
		{&harness.ProviderError{Status: 429}, "The model is busy; retrying in 2s…"},
		{&harness.ProviderError{Status: 503}, "The model is busy; retrying in 2s…"},
		{&harness.ProviderError{Status: 502}, "The model provider failed (HTTP 502); retrying in 2s…"},
		{&harness.ProviderError{Timeout: true}, "The model did not answer in time; retrying in 2s…"},
		{&harness.ProviderError{Unreachable: true, DNS: true}, "I could not reach the model (network error); retrying in 2s…"},
	}
	for _, c := range cases {
		if got := c.e.RetryStatus(1500 * time.Millisecond); got != c.want {
			t.Errorf("%+v: got %q, want %q", *c.e, got, c.want)
		}
	}
}

// closedPort returns a 127.0.0.1 address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// A model that cannot be reached is reported as a network failure, while retrying and at the
// end, never as a busy model, and the person is told to try later.
func TestUnreachableModelIsANetworkErrorNotABusyModel(t *testing.T) {
	cases := map[string]struct {
		baseURL string
		dns     bool
	}{
		"connection refused": {baseURL: "http://" + closedPort(t) + "/v1"},
		"unresolvable host":  {baseURL: "http://model.gateway-test.invalid/v1", dns: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p, err := harness.NewProvider(harness.Config{Provider: "openai", Model: "gpt-test", BaseURL: tc.baseURL, APIKey: secret.Secret(testKey)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			s := openSession(t, harness.SessionOptions{Provider: p, MaxRetries: 1, Timeout: 20 * time.Second})
			var u updates
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			_, err = s.Run(ctx, "hi", u.on)
			var pe *harness.ProviderError
			if !errors.As(err, &pe) {
				t.Fatalf("err = %#v; want a *ProviderError", err)
			}
			if pe.Attempts != 2 || !pe.Unreachable || pe.DNS != tc.dns || pe.Timeout || pe.Status != 0 {
				t.Errorf("error %+v; want unreachable (dns %v) after 2 attempts", *pe, tc.dns)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "I could not reach the model (network error") || !strings.HasSuffix(msg, "Please try again later.") {
				t.Errorf("the user reads %q; want a plain network-error message", msg)
			}
			st := u.of(harness.UpdateStatus)
			if len(st) != 1 {
				t.Fatalf("status updates %+v; want one, before the second attempt", st)
			}
			for _, text := range append([]string{msg}, st[0].Text) {
				if strings.Contains(strings.ToLower(text), "busy") {
					t.Errorf("%q calls an unreachable model busy", text)
				}
				if strings.Contains(text, testKey) {
					t.Errorf("%q leaks the key", text)
				}
			}
			if !strings.Contains(st[0].Text, "could not reach the model") {
				t.Errorf("status %q; want it to say the model could not be reached", st[0].Text)
			}
		})
	}
}
