package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Leases are held in a JetStream key-value bucket whose entries expire TTL after their
// last write: a holder keeps its lease by renewing it well within TTL, and when it dies
// the lease is free again TTL later. They give one process at a time a partition of the
// intake, or a connection a platform allows once per token (Telegram long polling).
type Leases struct {
	kv  jetstream.KeyValue
	ttl time.Duration
}

// ErrLeaseHeld is returned by Acquire when another holder has the lease.
var ErrLeaseHeld = errors.New("the lease is held by another process")

// ErrLeaseLost is returned by Renew when the lease expired or was taken meanwhile: the
// holder must stop the work the lease guards at once.
var ErrLeaseLost = errors.New("the lease was lost")

// OpenLeases creates or opens the bucket. ttl is how long a dead holder blocks a lease.
func OpenLeases(ctx context.Context, js jetstream.JetStream, bucket string, ttl time.Duration) (*Leases, error) {
	// Opened when it exists with this TTL, made (or its TTL changed) otherwise: processes
	// starting together do not each update the bucket's stream while others use it.
	kv, err := js.KeyValue(ctx, bucket)
	if err == nil {
		var st jetstream.KeyValueStatus
		if st, err = kv.Status(ctx); err == nil && st.TTL() != ttl {
			err = jetstream.ErrBucketNotFound // not as wanted: update below
		}
	}
	if err != nil {
		kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, TTL: ttl, History: 1})
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: nats: cannot open the lease bucket %s: %w", bucket, err)
	}
	return &Leases{kv: kv, ttl: ttl}, nil
}

// TTL is how long a lease lives without renewal.
func (l *Leases) TTL() time.Duration { return l.ttl }

// Lease is one held lease.
type Lease struct {
	l      *Leases
	name   string
	holder string
	rev    uint64
}

// Acquire takes the lease name for holder if nobody holds it; ErrLeaseHeld otherwise.
func (l *Leases) Acquire(ctx context.Context, name, holder string) (*Lease, error) {
	rev, err := l.kv.Create(ctx, name, []byte(holder))
	if errors.Is(err, jetstream.ErrKeyExists) {
		return nil, ErrLeaseHeld
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: nats: lease %s: %w", name, err)
	}
	return &Lease{l: l, name: name, holder: holder, rev: rev}, nil
}

// Holder names who holds name; "" when nobody does.
func (l *Leases) Holder(ctx context.Context, name string) (string, error) {
	e, err := l.kv.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("cluster: nats: lease %s: %w", name, err)
	}
	return string(e.Value()), nil
}

// Renew extends the lease by TTL; ErrLeaseLost if it expired or another took it.
func (h *Lease) Renew(ctx context.Context) error {
	rev, err := h.l.kv.Update(ctx, h.name, []byte(h.holder), h.rev)
	if err != nil {
		if wrongRevision(err) {
			return ErrLeaseLost
		}
		return fmt.Errorf("cluster: nats: lease %s: %w", h.name, err)
	}
	h.rev = rev
	return nil
}

// Release gives the lease up, if it is still this holder's.
func (h *Lease) Release(ctx context.Context) error {
	err := h.l.kv.Delete(ctx, h.name, jetstream.LastRevision(h.rev))
	if wrongRevision(err) {
		// A renewal cut short by the hold's end may still have reached the bucket, with a
		// revision this lease never learnt: the entry is still ours if it names this
		// holder (names are unique to a process), and is given up at its own revision.
		// Left, it would block the lease for a TTL after a clean release.
		e, gerr := h.l.kv.Get(ctx, h.name)
		if gerr != nil || string(e.Value()) != h.holder {
			return nil // gone, or another holder's: not ours to give up
		}
		err = h.l.kv.Delete(ctx, h.name, jetstream.LastRevision(e.Revision()))
		if wrongRevision(err) {
			return nil // changed again meanwhile: not ours any more
		}
	}
	if err != nil {
		return fmt.Errorf("cluster: nats: lease %s: %w", h.name, err)
	}
	return nil
}

// wrongRevision reports a conditional write refused because the key changed since the
// revision given.
func wrongRevision(err error) bool {
	if errors.Is(err, jetstream.ErrKeyExists) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// Name is the lease's name.
func (h *Lease) Name() string { return h.name }

// Count is the number of live leases whose names start with prefix (e.g. "member.").
func (l *Leases) Count(ctx context.Context, prefix string) (int, error) {
	kl, err := l.kv.ListKeysFiltered(ctx, prefix+">")
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("cluster: nats: %w", err)
	}
	n := 0
	for range kl.Keys() {
		n++
	}
	return n, nil
}
