package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"
)

// Deadlines of member-to-member calls (docs/cluster.md, "Deadlines").
const (
	// ConnectTimeout bounds connecting to a member: the TCP connection
	// and the TLS handshake each (a SIGSTOPped member's kernel still
	// accepts connections, its process never answers the handshake).
	ConnectTimeout = 3 * time.Second
	// DefaultForwardTimeout is how long a forwarded request may take
	// (Config.ForwardTimeout, guestlinkd --cluster-forward-timeout),
	// plus the request's own timeout for the requests that have one (a
	// wait's ?timeout, a state action's "timeout").
	DefaultForwardTimeout = 30 * time.Second
	// StateAllowance is what a forwarded state action without a timeout
	// of its own may take beyond the forward timeout (the backend's
	// default stop).
	StateAllowance = 60 * time.Second
	// LongAllowance is what a forwarded create (its image and first
	// start), snapshot or restore may take beyond the forward timeout.
	LongAllowance = 10 * time.Minute
)

// Headers of a forwarded request's deadline: the time the forwarding
// member still gives the request (milliseconds, counted from its arrival)
// and the deadline itself (Unix milliseconds, for a request that sat
// unread at a frozen member). The owner takes the earlier of the two.
const (
	HeaderTimeout  = "X-Guestlink-Timeout"
	HeaderDeadline = "X-Guestlink-Deadline"
)

// SetDeadline writes deadline into the headers of a forwarded request.
func SetDeadline(h http.Header, deadline time.Time) {
	h.Set(HeaderTimeout, strconv.FormatInt(max(time.Until(deadline).Milliseconds(), 0), 10))
	h.Set(HeaderDeadline, strconv.FormatInt(deadline.UnixMilli(), 10))
}

// ErrDeadlinePassed means a forwarded request arrived, or waited, past the
// deadline its forwarding member gave it: its caller has its answer (503)
// already, so it is not carried out.
var ErrDeadlinePassed = errors.New("the forwarded request's deadline passed")

// ForwardedDeadline returns the deadline a forwarded request carries
// (get reads a header), measured from arrived; ok is false when it
// carries none. A malformed header is an error.
func ForwardedDeadline(get func(string) string, arrived time.Time) (deadline time.Time, ok bool, err error) {
	if v := get(HeaderTimeout); v != "" {
		ms, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil || ms < 0 {
			return time.Time{}, false, fmt.Errorf("malformed %s %q", HeaderTimeout, v)
		}
		deadline, ok = arrived.Add(time.Duration(ms)*time.Millisecond), true
	}
	if v := get(HeaderDeadline); v != "" {
		ms, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil || ms < 0 {
			return time.Time{}, false, fmt.Errorf("malformed %s %q", HeaderDeadline, v)
		}
		if d := time.UnixMilli(ms); !ok || d.Before(deadline) {
			deadline, ok = d, true
		}
	}
	return deadline, ok, nil
}

// ForwardTimeout is how long a forwarded request may take before the
// forwarding member answers 503 (without the request's own timeout).
func (c *Cluster) ForwardTimeout() time.Duration { return c.cfg.ForwardTimeout }

// NotAnswered is the error of a call to member that failed or did not
// answer within budget: "member b did not answer in 30 s" when the budget
// ran out, the cause otherwise. It wraps ErrOffline.
func NotAnswered(member string, budget time.Duration, err error) error {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return fmt.Errorf("member %s did not answer in %s: %w", member, seconds(budget), ErrOffline)
	}
	return fmt.Errorf("member %s did not answer: %v: %w", member, err, ErrOffline)
}

// seconds formats d as "30 s" (or "1.5 s").
func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + " s"
}

// transport is the transport of the client to one member: bounded
// connection set-up; the deadline of the answer is the request's context
// (a forwarded request's budget, or for a stream the time to its headers).
func transport(tlsCfg *tls.Config) *http.Transport {
	d := &net.Dialer{Timeout: ConnectTimeout, KeepAlive: 15 * time.Second}
	return &http.Transport{
		DialContext:         d.DialContext,
		TLSClientConfig:     tlsCfg,
		TLSHandshakeTimeout: ConnectTimeout,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
	}
}
