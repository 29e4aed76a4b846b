package cluster

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"gateway/internal/secret"
)

// Config is the `cluster:` section. Both empty (the default): a single node, and nothing
// here is touched.
type Config struct {
	NATSURL     secret.Secret `mapstructure:"nats_url"`     // JetStream: intake, per-chat order, ownership (may hold a password)
	PostgresURL secret.Secret `mapstructure:"postgres_url"` // sessions and gateway state
}

// Enabled reports whether cluster mode is configured.
func (c Config) Enabled() bool { return c.NATSURL.IsSet() || c.PostgresURL.IsSet() }

// Validate checks the section without connecting; every problem names its key.
func (c Config) Validate() error {
	if !c.Enabled() {
		return nil
	}
	var errs []error
	if !c.PostgresURL.IsSet() {
		errs = append(errs, errors.New("cluster.postgres_url: must be set in cluster mode (sessions and gateway state live there)"))
	} else if u, err := url.Parse(c.PostgresURL.Reveal()); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" {
		errs = append(errs, fmt.Errorf("cluster.postgres_url: %s is not a postgres://user@host:port/database URL", Redact(c.PostgresURL.Reveal())))
	}
	if !c.NATSURL.IsSet() {
		errs = append(errs, errors.New("cluster.nats_url: must be set in cluster mode (intake runs on NATS JetStream)"))
	} else if u, err := url.Parse(c.NATSURL.Reveal()); err != nil || (u.Scheme != "nats" && u.Scheme != "tls") || u.Host == "" {
		errs = append(errs, fmt.Errorf("cluster.nats_url: %s is not a nats://host:port URL", Redact(c.NATSURL.Reveal())))
	}
	return errors.Join(errs...)
}

// Redact returns a URL with its password replaced, for messages and logs. A string that
// does not parse as a URL is not shown at all.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(an unreadable URL)"
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	q := u.Query()
	if q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// scrub removes raw's password from err's text: driver errors may quote the connection string.
func scrub(err error, raw string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	for _, pw := range passwords(raw) {
		msg = strings.ReplaceAll(msg, pw, "xxxxx")
	}
	if msg == err.Error() {
		return err
	}
	return errors.New(msg)
}

func passwords(raw string) []string {
	var out []string
	u, err := url.Parse(raw)
	if err != nil {
		return nil
	}
	if pw, ok := u.User.Password(); ok && pw != "" {
		out = append(out, pw)
		if esc := url.QueryEscape(pw); esc != pw {
			out = append(out, esc)
		}
	}
	if pw := u.Query().Get("password"); pw != "" {
		out = append(out, pw)
	}
	return out
}
