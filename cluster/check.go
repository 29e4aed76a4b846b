package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// CheckNATS reaches the NATS server at url and its JetStream, and reports in plain words
// why it cannot be used; it creates nothing (`gateway check`).
func CheckNATS(ctx context.Context, url string) error {
	where := Redact(url)
	timeout := 5 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	nc, err := nats.Connect(url, nats.Timeout(timeout), nats.NoReconnect(), nats.Name("gateway check"))
	if err != nil {
		msg := scrub(err, url).Error()
		switch {
		case errors.Is(err, nats.ErrNoServers) || strings.Contains(msg, "connection refused"):
			return fmt.Errorf("cluster.nats_url: nothing accepts connections at %s (is NATS running, on that host and port?)", where)
		case errors.Is(err, nats.ErrAuthorization) || strings.Contains(strings.ToLower(msg), "authorization"):
			return fmt.Errorf("cluster.nats_url: NATS at %s refused the credentials", where)
		}
		return fmt.Errorf("cluster.nats_url: cannot reach NATS at %s: %s", where, msg)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err == nil {
		_, err = js.AccountInfo(ctx)
	}
	if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
		return fmt.Errorf("cluster.nats_url: NATS at %s does not have JetStream enabled (start nats-server with -js)", where)
	}
	if err != nil {
		return fmt.Errorf("cluster.nats_url: NATS at %s: JetStream did not answer: %s", where, scrub(err, url))
	}
	return nil
}
