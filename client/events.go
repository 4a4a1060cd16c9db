package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/errdefs"
)

// closeTryAgainLater is the close code the API ends an events websocket
// with when the subscription overflowed: the client resumes.
const closeTryAgainLater = websocket.CloseTryAgainLater

// maxResumes bounds how many times in a row Events resumes without
// receiving an event in between.
const maxResumes = 5

// EventFilter selects the events of Events; empty lists match all.
type EventFilter struct {
	Types     []string // "lifecycle", "logging"
	Instances []string
	// Since resumes after an event id: every event after it is delivered
	// first. 0 means from now on, unless Replay is set.
	Since int64
	// Replay asks for the stored events after Since even when Since is 0:
	// with Since 0, every stored event from the first one.
	Replay bool
}

// query encodes f as the events query string.
func (f EventFilter) query(since int64) url.Values {
	q := url.Values{}
	if len(f.Types) > 0 {
		q.Set("type", strings.Join(f.Types, ","))
	}
	if len(f.Instances) > 0 {
		q.Set("instance", strings.Join(f.Instances, ","))
	}
	if since > 0 || f.Replay {
		q.Set("since", strconv.FormatInt(since, 10))
	}
	return q
}

// Events streams the daemon's events matching f until ctx is done. When the
// daemon drops the stream because it fell behind, Events resumes after the
// last id it delivered, so nothing is lost or repeated. The event channel
// is closed when the stream ends; the error channel then carries at most one
// error saying why (nothing when ctx ended it). The first connection is made
// before Events returns, so a bad filter is reported at once on the error
// channel and events published after Events returns are not missed.
func (c *Client) Events(ctx context.Context, f EventFilter) (<-chan api.Event, <-chan error) {
	out := make(chan api.Event, 64)
	errc := make(chan error, 1)
	conn, err := c.dialEvents(ctx, f, f.Since)
	if err != nil {
		close(out)
		if ctx.Err() == nil {
			errc <- err
		}
		close(errc)
		return out, errc
	}
	go func() {
		defer close(errc)
		defer close(out)
		last, resumes := f.Since, 0
		for {
			got, err := c.readEvents(ctx, conn, out, &last)
			if ctx.Err() != nil {
				return
			}
			if got {
				resumes = 0
			}
			var ce *websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != closeTryAgainLater || resumes >= maxResumes {
				errc <- err
				return
			}
			resumes++
			if conn, err = c.dialEvents(ctx, f, last); err != nil {
				if ctx.Err() == nil {
					errc <- err
				}
				return
			}
		}
	}()
	return out, errc
}

// dialEvents opens the events websocket.
func (c *Client) dialEvents(ctx context.Context, f EventFilter, since int64) (*websocket.Conn, error) {
	d := websocket.Dialer{NetDialContext: c.dial, TLSClientConfig: c.tls, HandshakeTimeout: 30 * time.Second}
	target := c.wsBase + "/1.0/events"
	if q := f.query(since); len(q) > 0 {
		target += "?" + q.Encode()
	}
	h := http.Header{}
	c.authorize(h)
	conn, resp, err := d.DialContext(ctx, target, h)
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			defer resp.Body.Close()
			return nil, decodeResponse(resp, "GET /1.0/events", nil)
		}
		return nil, fmt.Errorf("GET /1.0/events: daemon %w at %s: %w", errdefs.ErrUnavailable, c.addr, err)
	}
	return conn, nil
}

// readEvents forwards conn's events to out until conn or ctx ends; it
// reports whether it forwarded any and the error that ended the stream.
func (c *Client) readEvents(ctx context.Context, conn *websocket.Conn, out chan<- api.Event, last *int64) (bool, error) {
	stop := context.AfterFunc(ctx, func() {
		_ = conn.WriteControl(websocket.CloseMessage,
			websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
		_ = conn.Close()
	})
	defer stop()
	defer conn.Close()
	got := false
	for {
		_, msg, err := conn.ReadMessage()
		if err != nil {
			return got, fmt.Errorf("reading events: %w", err)
		}
		var ev api.Event
		if err := json.Unmarshal(msg, &ev); err != nil {
			return got, fmt.Errorf("decoding event after id %d: %w", *last, err)
		}
		if ev.Type == api.EventTypeLifecycle {
			if lc, err := ev.Lifecycle(); err == nil {
				if name, ok := strings.CutPrefix(lc.Source, "/1.0/instances/"); ok {
					ev.Instance = name
				}
			}
		}
		select {
		case out <- ev:
		case <-ctx.Done():
			return got, ctx.Err()
		}
		got, *last = true, ev.ID
	}
}
