package api

import (
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
)

// Limits bound the admin API's concurrent requests, so that a flood of
// requests (thousands of concurrent GET /1.0/instances, each a few MB)
// cannot starve the daemon's own work: plugin health checks, the agent
// monitor, timeline and event writes. At most MaxInFlight requests run at
// once; up to MaxQueue more wait for a slot, each at most QueueWait; any
// other request is answered at once with 503 Service Unavailable, a
// Retry-After header and LXD's error envelope. Event websockets
// (/1.0/events) are long-lived and are not counted. Zero fields take the
// defaults shown.
type Limits struct {
	// MaxInFlight is how many requests run at once (4 × GOMAXPROCS).
	MaxInFlight int
	// MaxQueue is how many requests may wait for a slot (2 × MaxInFlight).
	MaxQueue int
	// QueueWait is how long a request waits for a slot before it is
	// refused (1s).
	QueueWait time.Duration
	// RetryAfter is what the Retry-After header of a refusal says, rounded
	// up to whole seconds (1s).
	RetryAfter time.Duration
}

// withDefaults returns l with zero fields set to their defaults.
func (l Limits) withDefaults() Limits {
	if l.MaxInFlight <= 0 {
		l.MaxInFlight = 4 * runtime.GOMAXPROCS(0)
	}
	if l.MaxQueue <= 0 {
		l.MaxQueue = 2 * l.MaxInFlight
	}
	if l.QueueWait <= 0 {
		l.QueueWait = time.Second
	}
	if l.RetryAfter <= 0 {
		l.RetryAfter = time.Second
	}
	return l
}

// limiter enforces Limits; its zero value is ready once init ran.
type limiter struct {
	once    sync.Once
	cfg     Limits
	slots   chan struct{} // one token per running request
	waiting atomic.Int64  // requests queued for a slot
	refused atomic.Int64  // requests answered 503, since start
}

func (l *limiter) init(cfg Limits) {
	l.once.Do(func() {
		l.cfg = cfg.withDefaults()
		l.slots = make(chan struct{}, l.cfg.MaxInFlight)
	})
}

// unlimited reports whether a request is exempt from the limit: the events
// websocket, which would hold a slot for as long as it is open.
func unlimited(c *fiber.Ctx) bool {
	return strings.TrimSuffix(c.Path(), "/") == "/1.0/events"
}

// limit is the middleware that enforces the API's Limits.
func (a *API) limit(c *fiber.Ctx) error {
	l := &a.lim
	l.init(a.cfg.Limits)
	if unlimited(c) {
		return c.Next()
	}
	select {
	case l.slots <- struct{}{}:
	default:
		if !l.queue(c) {
			return l.refuse(c)
		}
	}
	defer func() { <-l.slots }()
	return c.Next()
}

// queue waits for a slot, if the queue has room, for at most QueueWait; it
// reports whether the request got one.
func (l *limiter) queue(c *fiber.Ctx) bool {
	if l.waiting.Add(1) > int64(l.cfg.MaxQueue) {
		l.waiting.Add(-1)
		return false
	}
	defer l.waiting.Add(-1)
	t := time.NewTimer(l.cfg.QueueWait)
	defer t.Stop()
	select {
	case l.slots <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-c.Context().Done():
		return false
	}
}

// refuse answers 503 with Retry-After.
func (l *limiter) refuse(c *fiber.Ctx) error {
	l.refused.Add(1)
	secs := int((l.cfg.RetryAfter + time.Second - 1) / time.Second)
	c.Set(fiber.HeaderRetryAfter, strconv.Itoa(secs))
	return fiber.NewError(http.StatusServiceUnavailable, fmt.Sprintf(
		"the daemon is busy: %d requests are running and %d waiting (limits %d and %d); retry after %d s",
		len(l.slots), l.waiting.Load(), l.cfg.MaxInFlight, l.cfg.MaxQueue, secs))
}
