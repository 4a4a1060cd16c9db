package adminapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gofiber/contrib/websocket"
	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/errdefs"
)

// Close codes of the events websocket. A client that sees
// CloseTryAgainLater resumes with since=<the last id it received>.
const (
	CloseTryAgainLater = websocket.CloseTryAgainLater // subscription overflowed or ended: resume
	CloseGoingAway     = websocket.CloseGoingAway     // daemon shutting down
)

const (
	// writeWait bounds each websocket write.
	writeWait = 10 * time.Second
	// claimWait is how long a subscription made before the upgrade waits
	// for the websocket handler before it is dropped.
	claimWait = 30 * time.Second
	// localsKey carries the pending subscription from the upgrade check to
	// the websocket handler.
	localsKey = "guestlink.events.pending"
)

// pendingSub is a subscription made before the websocket upgrade. Exactly
// one of the websocket handler and the expiry timer claims it.
type pendingSub struct {
	sub     *events.Subscription
	after   int64
	recheck recheckFunc // TCP: the credentials, checked again at every ping
	claimed atomic.Bool
	timer   *time.Timer
}

// claim returns whether the caller now owns the subscription.
func (p *pendingSub) claim() bool { return p.claimed.CompareAndSwap(false, true) }

// parseEventFilter reads ?type=, ?instance= (each repeatable and
// comma-separated) and ?since= of an events request.
func parseEventFilter(c *fiber.Ctx) (events.Filter, error) {
	var f events.Filter
	for _, t := range multiQuery(c, "type") {
		switch t {
		case events.TypeLifecycle, events.TypeLogging:
			f.Types = append(f.Types, t)
		default:
			return f, badRequest("invalid event type %q: must be %s or %s", t, events.TypeLifecycle, events.TypeLogging)
		}
	}
	for _, name := range multiQuery(c, "instance") {
		if err := instance.ValidateName(name); err != nil {
			return f, fmt.Errorf("invalid instance filter: %w", err)
		}
		f.Instances = append(f.Instances, name)
	}
	if v := c.Query("since"); v != "" {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil || id < 0 {
			return f, badRequest("invalid since %q: must be a non-negative event id", v)
		}
		f.After, f.Replay = id, true // since=0: from the first stored event
	}
	return f, nil
}

// multiQuery returns the non-empty values of a query key given repeatedly
// or comma-separated.
func multiQuery(c *fiber.Ctx, key string) []string {
	var out []string
	for _, raw := range c.Context().QueryArgs().PeekMulti(key) {
		for v := range strings.SplitSeq(string(raw), ",") {
			if v = strings.TrimSpace(v); v != "" {
				out = append(out, v)
			}
		}
	}
	return out
}

// eventsUpgrade checks an events request before the websocket upgrade, so
// bad filters and refused subscriptions are answered as HTTP errors.
func (a *API) eventsUpgrade(c *fiber.Ctx) error {
	filter, err := parseEventFilter(c)
	if err != nil {
		return err
	}
	if !websocket.IsWebSocketUpgrade(c) {
		return fiber.NewError(http.StatusBadRequest, "GET /1.0/events is a websocket: send an upgrade request")
	}
	if err := checkOrigin(c); err != nil {
		return err
	}
	select {
	case <-a.closing:
		return fiber.NewError(http.StatusServiceUnavailable, "the daemon is shutting down")
	default:
	}
	sub, err := a.cfg.Events.Subscribe(filter)
	if err != nil {
		return fmt.Errorf("subscribing to events: %w", err)
	}
	p := &pendingSub{sub: sub, after: filter.After}
	p.recheck, _ = c.Locals(recheckKey).(recheckFunc)
	// If the upgrade fails after this handler returns, nobody runs the
	// websocket handler: the timer then closes the subscription.
	p.timer = time.AfterFunc(claimWait, func() {
		if p.claim() {
			sub.Close()
		}
	})
	c.Locals(localsKey, p)
	if err := c.Next(); err != nil {
		if p.claim() {
			p.timer.Stop()
			sub.Close()
		}
		return err
	}
	return nil
}

// checkOrigin refuses websockets opened by a web page of another origin
// (browsers send Origin; other clients usually do not). The origin is
// compared with the request's own Host header, never with X-Forwarded-Host,
// which any client can send.
func checkOrigin(c *fiber.Ctx) error {
	origin := c.Get(fiber.HeaderOrigin)
	if origin == "" {
		return nil
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || !strings.EqualFold(u.Host, string(c.Request().Host())) {
		return fiber.NewError(http.StatusForbidden, fmt.Sprintf("cross-origin websocket from %q refused", origin))
	}
	return nil
}

// eventsSocket returns the websocket handler of GET /1.0/events.
func (a *API) eventsSocket() fiber.Handler {
	return websocket.New(func(conn *websocket.Conn) {
		p, _ := conn.Locals(localsKey).(*pendingSub)
		if p == nil {
			return
		}
		p.timer.Stop()
		if !p.claim() {
			closeWith(conn, CloseTryAgainLater, "event subscription expired before the websocket was ready; reconnect")
			return
		}
		a.streams.Add(1)
		defer a.streams.Done()
		a.stream(conn, p.sub, p.after, p.recheck)
	}, websocket.Config{HandshakeTimeout: 10 * time.Second})
}

// stream sends sub's events on conn as JSON text messages, pings the client
// every PingInterval, and ends when the client goes, the subscription ends
// or the API shuts down.
func (a *API) stream(conn *websocket.Conn, sub *events.Subscription, last int64, recheck recheckFunc) {
	defer sub.Close()
	ping := a.cfg.PingInterval
	pongWait := max(2*ping, MinPongWait)

	// The reader handles pongs and the client's close; it ends on any error.
	gone := make(chan struct{})
	_ = conn.SetReadDeadline(time.Now().Add(pongWait))
	conn.SetPongHandler(func(string) error {
		return conn.SetReadDeadline(time.Now().Add(pongWait))
	})
	conn.SetReadLimit(4096)
	go func() {
		defer close(gone)
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
		}
	}()
	defer func() {
		_ = conn.Close()
		<-gone
	}()

	ticker := time.NewTicker(ping)
	defer ticker.Stop()
	for {
		select {
		case ev, ok := <-sub.C():
			if !ok {
				msg := fmt.Sprintf("event subscription ended; resume with since=%d", last)
				if err := sub.Err(); err != nil {
					msg = fmt.Sprintf("event subscription ended (%v); resume with since=%d", err, last)
				}
				closeWith(conn, CloseTryAgainLater, msg)
				a.waitClose(gone)
				return
			}
			_ = conn.SetWriteDeadline(time.Now().Add(writeWait))
			if err := conn.WriteJSON(WireEvent(ev)); err != nil {
				return
			}
			last = ev.ID
		case <-ticker.C:
			// A revoked token or certificate ends the stream at the next
			// ping; a store error does not (the credentials were good).
			if recheck != nil {
				rctx, cancel := context.WithTimeout(context.Background(), writeWait)
				err := recheck(rctx)
				cancel()
				if errors.Is(err, errdefs.ErrUnauthorized) {
					closeWith(conn, websocket.ClosePolicyViolation, "credentials revoked or expired: "+err.Error())
					a.waitClose(gone)
					return
				}
			}
			if err := conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(writeWait)); err != nil {
				return
			}
		case <-gone:
			return
		case <-a.closing:
			closeWith(conn, CloseGoingAway, "the daemon is shutting down")
			a.waitClose(gone)
			return
		}
	}
}

// waitClose gives the client a moment to answer a close frame.
func (a *API) waitClose(gone <-chan struct{}) {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-gone:
	case <-t.C:
	}
}

// closeWith sends a close frame; websocket close reasons are limited to
// 123 bytes.
func closeWith(conn *websocket.Conn, code int, msg string) {
	if len(msg) > 123 {
		msg = strings.ToValidUTF8(msg[:123], "")
	}
	_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, msg), time.Now().Add(writeWait))
}

// WireEvent converts an event of the bus to the message GET /1.0/events
// sends: the same fields and metadata bytes (the instance name stays
// behind, as it always did).
func WireEvent(ev events.Event) api.Event {
	return api.Event{ID: ev.ID, Type: ev.Type, Timestamp: ev.Timestamp, Project: ev.Project, Location: ev.Location, Metadata: ev.Metadata}
}

// untilClosing returns a context cancelled when the API closes (Shutdown)
// or cancel is called: for work a request starts that outlives the
// request (following an exec, a console) but never the API.
func (a *API) untilClosing() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-a.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
