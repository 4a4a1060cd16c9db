package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/guestlink/guestlink/errdefs"
)

// WriteRetry says how Publish retries a failed append to the event log: a
// busy or briefly failing store (a flood of requests, a locked SQLite file,
// a PostgreSQL failover) must not lose events. Zero fields take the
// defaults of DefaultWriteRetry.
type WriteRetry struct {
	Initial time.Duration // first wait between attempts (50ms)
	Max     time.Duration // longest wait between attempts (1s)
	Elapsed time.Duration // give up after this long (15s)
	Attempt time.Duration // each attempt's own deadline (5s)
}

// DefaultWriteRetry is the retry of a bus made without WithWriteRetry.
var DefaultWriteRetry = WriteRetry{Initial: 50 * time.Millisecond, Max: time.Second, Elapsed: 15 * time.Second, Attempt: 5 * time.Second}

func (r WriteRetry) withDefaults() WriteRetry {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&r.Initial, DefaultWriteRetry.Initial)
	def(&r.Max, DefaultWriteRetry.Max)
	def(&r.Elapsed, DefaultWriteRetry.Elapsed)
	def(&r.Attempt, DefaultWriteRetry.Attempt)
	return r
}

// WithWriteRetry sets how a failed append to the event log is retried
// (default DefaultWriteRetry).
func WithWriteRetry(r WriteRetry) Option {
	return func(b *Bus) { b.retry = r.withDefaults() }
}

// appendEvent appends rec to the event log, retrying a failure that may go
// away (not a closed store, an invalid event or a cancelled context) with
// exponential backoff until the retry budget is spent or ctx ends (callers
// that announce a change already made publish with a context that is not
// cancelled). Each failed attempt is logged; the error of the last one is
// returned.
func (b *Bus) appendEvent(ctx context.Context, rec *Record) error {
	r := b.retry
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval = r.Initial, r.Max
	attempts := 0
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		attempts++
		actx, cancel := context.WithTimeout(ctx, r.Attempt)
		defer cancel()
		err := b.store.AppendEvent(actx, rec)
		switch {
		case err == nil:
			return struct{}{}, nil
		case errors.Is(err, errdefs.ErrClosed) || errors.Is(err, errdefs.ErrInvalid) || errors.Is(err, context.Canceled):
			return struct{}{}, backoff.Permanent(err)
		}
		b.log.Warn("appending to the event log failed, retrying", "type", rec.Type, "instance", rec.Instance, "attempt", attempts, "err", err)
		return struct{}{}, err
	}, backoff.WithBackOff(bo), backoff.WithMaxElapsedTime(r.Elapsed))
	if err != nil {
		b.log.Error("event lost", "type", rec.Type, "instance", rec.Instance, "attempts", attempts, "err", err)
		return fmt.Errorf("appending to the event log (%d attempts): %w", attempts, err)
	}
	return nil
}
