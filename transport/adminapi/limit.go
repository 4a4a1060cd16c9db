package adminapi

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
// Retry-After header and LXD's error envelope. Instance lists (GET
// /1.0/instances, the costly answer) have slots of their own, MaxLists, so
// that a flood of lists leaves room for the other requests (a state
// change, a restart). Event websockets (/1.0/events) are long-lived and are
// not counted. Zero fields take the defaults shown.
type Limits struct {
	// MaxInFlight is how many requests run at once (8 × GOMAXPROCS: most
	// requests wait for a commit or a plugin rather than use a CPU, and the
	// store's group commit gains from concurrent writes).
	MaxInFlight int
	// MaxQueue is how many requests may wait for a slot (8 × MaxInFlight).
	MaxQueue int
	// QueueWait is how long a request waits for a slot before it is
	// refused (5s).
	QueueWait time.Duration
	// RetryAfter is what the Retry-After header of a refusal says, rounded
	// up to whole seconds (1s).
	RetryAfter time.Duration
	// MaxLists is how many instance lists run at once (2 × GOMAXPROCS);
	// up to 8 × MaxLists more wait, each at most QueueWait.
	MaxLists int
}

// withDefaults returns l with zero fields set to their defaults.
func (l Limits) withDefaults() Limits {
	if l.MaxInFlight <= 0 {
		l.MaxInFlight = 8 * runtime.GOMAXPROCS(0)
	}
	if l.MaxQueue <= 0 {
		l.MaxQueue = 8 * l.MaxInFlight
	}
	if l.QueueWait <= 0 {
		l.QueueWait = 5 * time.Second
	}
	if l.RetryAfter <= 0 {
		l.RetryAfter = time.Second
	}
	if l.MaxLists <= 0 {
		l.MaxLists = 2 * runtime.GOMAXPROCS(0)
	}
	return l
}

// limits are the API's two limiters: instance lists, and the rest.
type limits struct {
	once  sync.Once
	lists limiter
	other limiter
}

func (l *limits) init(cfg Limits) {
	l.once.Do(func() {
		cfg = cfg.withDefaults()
		l.other.init("requests", cfg.MaxInFlight, cfg.MaxQueue, cfg)
		l.lists.init("instance lists", cfg.MaxLists, 8*cfg.MaxLists, cfg)
	})
}

// limiter bounds one class of requests.
type limiter struct {
	what     string // "requests", "instance lists"
	maxQueue int
	cfg      Limits        // for QueueWait and RetryAfter
	slots    chan struct{} // one token per running request
	waiting  atomic.Int64  // requests queued for a slot
	refused  atomic.Int64  // requests answered 503, since start
}

func (l *limiter) init(what string, inFlight, queue int, cfg Limits) {
	l.what, l.maxQueue, l.cfg = what, queue, cfg
	l.slots = make(chan struct{}, inFlight)
}

// unlimited reports whether a request is exempt from the limit: the events
// websocket and the waits, which would hold a slot for as long as they are
// open.
func unlimited(c *fiber.Ctx) bool {
	return strings.TrimSuffix(c.Path(), "/") == "/1.0/events" || isWait(c) || isOperationStream(c)
}

// isList reports whether a request lists the instances.
func isList(c *fiber.Ctx) bool {
	return c.Method() == fiber.MethodGet && strings.TrimSuffix(c.Path(), "/") == "/1.0/instances"
}

// limit is the middleware that enforces the API's Limits.
func (a *API) limit(c *fiber.Ctx) error {
	a.lim.init(a.cfg.Limits)
	if unlimited(c) {
		return c.Next()
	}
	l := &a.lim.other
	if isList(c) {
		l = &a.lim.lists
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
	if l.waiting.Add(1) > int64(l.maxQueue) {
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
		"the daemon is busy: %d %s are running and %d waiting (limits %d and %d); retry after %d s",
		len(l.slots), l.what, l.waiting.Load(), cap(l.slots), l.maxQueue, secs))
}
