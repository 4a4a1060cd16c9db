// Package statebudget is the one budget of state changes each guest may
// make, whatever path it takes: a devlxd PATCH /1.0 (transport/devlxd) and an
// agent word read from the ring buffer (core/agentmon) draw from the same
// per-instance token bucket, so a guest cannot double its rate by mixing
// the two. Every accepted change is recorded (an event, a timeline entry):
// the budget is what keeps a guest from filling the store.
package statebudget

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Defaults of New: 10 changes per second over time, 20 at once (the rate
// devlxd PATCH /1.0 always had). A real agent changes state a few times per
// boot.
const (
	DefaultRate  = 10
	DefaultBurst = 20
)

// maxIdle is how many buckets a Budget keeps before it forgets the full
// ones (instances that stopped changing state): forgetting a full bucket
// changes nothing, since a new one starts full.
const maxIdle = 1024

// Budget is a token bucket of state changes per instance (by UUID). It is
// safe for concurrent use; create it with New and share one between every
// path that changes a guest's state.
type Budget struct {
	limit rate.Limit
	burst int

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
}

// New returns a Budget allowing each instance perSecond changes per second
// over time and burst at once. Zero or less takes DefaultRate and
// DefaultBurst.
func New(perSecond float64, burst int) *Budget {
	if perSecond <= 0 {
		perSecond = DefaultRate
	}
	if burst <= 0 {
		burst = DefaultBurst
	}
	return &Budget{limit: rate.Limit(perSecond), burst: burst, buckets: map[string]*rate.Limiter{}}
}

// Rate returns the changes per second allowed over time.
func (b *Budget) Rate() float64 { return float64(b.limit) }

// Burst returns the changes allowed at once.
func (b *Budget) Burst() int { return b.burst }

// Allow takes one change from uuid's budget now and reports whether there
// was one left. A change that is refused must not be made.
func (b *Budget) Allow(uuid string) bool {
	now := time.Now()
	return b.bucket(uuid, now).AllowN(now, 1)
}

// Wait returns how long from now until uuid's budget holds a change again
// (zero when it holds one now). It takes nothing.
func (b *Budget) Wait(uuid string) time.Duration {
	now := time.Now()
	tokens := b.bucket(uuid, now).TokensAt(now)
	if tokens >= 1 {
		return 0
	}
	return time.Duration((1 - tokens) / float64(b.limit) * float64(time.Second))
}

func (b *Budget) bucket(uuid string, now time.Time) *rate.Limiter {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.buckets[uuid]
	if l == nil {
		if len(b.buckets) >= maxIdle {
			for k, old := range b.buckets {
				if old.TokensAt(now) >= float64(b.burst) {
					delete(b.buckets, k)
				}
			}
		}
		l = rate.NewLimiter(b.limit, b.burst)
		b.buckets[uuid] = l
	}
	return l
}
