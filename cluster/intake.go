package cluster

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// IntakeConfig shapes the JetStream intake stream.
type IntakeConfig struct {
	Stream     string        // stream name (default GATEWAY_INTAKE)
	Subject    string        // subject prefix; partition p is Subject.p (default gateway.intake)
	Partitions int           // fixed; changing it needs a drained stream (default 64)
	Duplicates time.Duration // JetStream's duplicate window for Nats-Msg-Id (default 2 minutes)
}

func (c IntakeConfig) withDefaults() IntakeConfig {
	if c.Stream == "" {
		c.Stream = "GATEWAY_INTAKE"
	}
	if c.Subject == "" {
		c.Subject = "gateway.intake"
	}
	if c.Partitions <= 0 {
		c.Partitions = 64
	}
	if c.Duplicates <= 0 {
		c.Duplicates = 2 * time.Minute
	}
	return c
}

// Partition is the partition of a session key: one chat is always one partition, so one
// consumer sees all of its messages, in order.
func Partition(sessionKey string, partitions int) int {
	h := fnv.New32a()
	h.Write([]byte(sessionKey))
	return int(h.Sum32() % uint32(partitions))
}

// Intake publishes accepted messages to the intake stream. Consuming them (one active
// consumer per partition, through Lease) is the next step; see the package doc.
type Intake struct {
	js  jetstream.JetStream
	cfg IntakeConfig
}

// OpenIntake creates or updates the intake stream.
func OpenIntake(ctx context.Context, js jetstream.JetStream, cfg IntakeConfig) (*Intake, error) {
	cfg = cfg.withDefaults()
	want := jetstream.StreamConfig{
		Name:       cfg.Stream,
		Subjects:   []string{cfg.Subject + ".*"},
		Storage:    jetstream.FileStorage,
		Retention:  jetstream.WorkQueuePolicy, // a message leaves when it was answered (acked)
		Duplicates: cfg.Duplicates,
	}
	// Created once, updated only when this process wants it otherwise: processes starting
	// together do not each update a stream the others are already consuming.
	s, err := js.Stream(ctx, cfg.Stream)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		_, err = js.CreateStream(ctx, want)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			err = nil // another process created it meanwhile
		}
	case err == nil:
		have := s.CachedInfo().Config
		if !slices.Equal(have.Subjects, want.Subjects) || have.Duplicates != want.Duplicates || have.Retention != want.Retention {
			_, err = js.UpdateStream(ctx, want)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: nats: cannot create the intake stream %s: %w", cfg.Stream, err)
	}
	return &Intake{js: js, cfg: cfg}, nil
}

// Subject is the subject of partition p.
func (in *Intake) Subject(p int) string { return in.cfg.Subject + "." + strconv.Itoa(p) }

// Partitions is the number of partitions.
func (in *Intake) Partitions() int { return in.cfg.Partitions }

// Publish stores body in the partition of sessionKey and returns once JetStream has it:
// only then may the platform be acknowledged. A dedupKey (the platform message id) seen
// within the duplicate window is reported as dup and stored once.
func (in *Intake) Publish(ctx context.Context, sessionKey, dedupKey string, body []byte) (seq uint64, dup bool, err error) {
	if sessionKey == "" {
		return 0, false, errors.New("cluster: a message without a session key cannot be partitioned")
	}
	var opts []jetstream.PublishOpt
	if dedupKey != "" {
		opts = append(opts, jetstream.WithMsgID(dedupKey))
	}
	ack, err := in.js.Publish(ctx, in.Subject(Partition(sessionKey, in.cfg.Partitions)), body, opts...)
	if err != nil {
		return 0, false, fmt.Errorf("cluster: nats: the intake stream did not take the message: %w", err)
	}
	return ack.Sequence, ack.Duplicate, nil
}
