// Package upstream is the agent's HTTPS client of the daemon's devlxd
// handlers over the guest link. It pins the advertised daemon certificate,
// presents the agent certificate, and reuses connections (keep-alive and TLS
// session resumption) unless told to handshake per request.
package upstream

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/guestlink/guestlink/link/advert"
	"github.com/guestlink/guestlink/link/devlxdapi"
	"github.com/guestlink/guestlink/link/transport"
)

// Limits and timeouts of a request to the daemon.
const (
	// MaxResponse is the largest daemon answer read, in bytes.
	MaxResponse = 32 << 20
	// DialTimeout bounds connecting over the link.
	DialTimeout = 3 * time.Second
	// HandshakeTimeout bounds the TLS handshake.
	HandshakeTimeout = 5 * time.Second
	// RequestTimeout bounds a whole request when the caller's context has
	// no earlier deadline.
	RequestTimeout = 20 * time.Second
	// IdleTimeout is how long a connection to the daemon is kept for reuse
	// after its last request: longer than the daemon's own idle timeout
	// (transport/devlxd, 10 min), so the daemon is the one that closes. It
	// keeps as many idle connections as its budget of descriptors and
	// memory allows and closes the others; a request then resumes its TLS
	// session on a new connection. A connection the daemon closed is
	// found closed before a request is written on it (alive).
	IdleTimeout = 15 * time.Minute
)

// Sentinel errors.
var (
	// ErrNoAdvertisement is returned while no daemon has been advertised.
	ErrNoAdvertisement = errors.New("no daemon advertised yet")
	// ErrUnreachable wraps failures to reach the daemon (dial, TLS,
	// connection lost, timeout): no HTTP answer was received.
	ErrUnreachable = errors.New("daemon unreachable")
	// ErrBadAnswer is returned when the daemon answered something that is
	// not a devlxd envelope.
	ErrBadAnswer = errors.New("bad answer from daemon")
	// ErrShed marks, beside ErrUnreachable, a connection the daemon
	// accepted and closed before the TLS handshake ended: a daemon
	// shedding load (a connection that waited too long for one of its
	// handshake slots is closed unanswered, see transport/devlxd's
	// MaxHandshakeWait), not a daemon gone, which refuses connections.
	// The agent stays CONNECTED on it, as on a timeout.
	ErrShed = errors.New("the daemon closed the connection before the TLS handshake ended (busy)")
)

// Options configure a Client.
type Options struct {
	// Link is the guest side of the link used to dial the daemon.
	Link transport.Guest
	// Certificate is the agent's client certificate.
	Certificate tls.Certificate
	// PerRequestTLS disables connection reuse and TLS session resumption:
	// every request dials and handshakes (LXD's behaviour; for comparison).
	PerRequestTLS bool
	// IdleTimeout is how long an idle connection is kept (default
	// IdleTimeout).
	IdleTimeout time.Duration
}

// Client sends devlxd requests to the currently advertised daemon. It is safe
// for concurrent use; SetAdvertisement swaps the daemon under way.
//
// A request runs entirely on the caller's goroutine: it takes a kept-alive
// TLS connection from a small pool (or dials and handshakes one), writes the
// request and reads the answer on it, and the connection goes back to the
// pool once its body has been read to the end. net/http's Transport, which it
// replaces, hands every request to a writer goroutine and every answer back
// from a reader goroutine of the connection: two goroutine hand-offs (often
// two thread wake-ups) per request on the agent's hot path (docs/performance.md).
type Client struct {
	opts Options

	mu  sync.RWMutex
	adv *advert.Advertisement
	dc  *daemonConns
	// sessions is the TLS session cache of the daemon whose certificate is
	// sessionsPin. It outlives an advertisement: a restarted daemon
	// advertises a new port with the same certificate, and keeps its
	// ticket keys (transport/devlxd), so the agent's ticket resumes on it.
	// An advertisement of another certificate starts a new cache: no
	// ticket is ever offered to another daemon.
	sessions    tls.ClientSessionCache
	sessionsPin []byte
}

// New returns a Client with no daemon advertised.
func New(opts Options) *Client {
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = IdleTimeout
	}
	return &Client{opts: opts}
}

// SetAdvertisement points the client at the daemon of a. Pooled connections
// to the previous daemon are closed. A nil a forgets the daemon.
func (c *Client) SetAdvertisement(a *advert.Advertisement) error {
	var dc *daemonConns
	if a != nil {
		cert, err := a.ParseCertificate()
		if err != nil {
			return fmt.Errorf("pinning daemon certificate: %w", err)
		}
		dc = c.newConns(*a, cert.Raw)
	}
	c.mu.Lock()
	old := c.dc
	if a != nil {
		cp := *a
		c.adv = &cp
		c.dc = dc
	} else {
		c.adv, c.dc = nil, nil
	}
	c.mu.Unlock()
	if old != nil {
		old.close()
	}
	return nil
}

// Advertisement returns a copy of the current advertisement, or nil.
func (c *Client) Advertisement() *advert.Advertisement {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.adv == nil {
		return nil
	}
	cp := *c.adv
	return &cp
}

func (c *Client) newConns(a advert.Advertisement, pinned []byte) *daemonConns {
	tlsConf := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{c.opts.Certificate},
		// The name net/http sent (the request URL's host); the daemon
		// does not look at it.
		ServerName: "guestlink",
		// The daemon certificate is pinned byte for byte below instead of
		// being verified against a CA.
		InsecureSkipVerify: true, //nolint:gosec // pinned in VerifyConnection
		// X25519 alone: the link never leaves the host, and the daemon
		// offers no other exchange on it (docs/security.md), so a hybrid
		// key share would be computed for nothing.
		CurvePreferences: []tls.CurveID{tls.X25519},
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || !bytes.Equal(cs.PeerCertificates[0].Raw, pinned) {
				return errors.New("daemon certificate does not match the advertised one")
			}
			return nil
		},
	}
	if !c.opts.PerRequestTLS {
		// The ticket of the advertisement's check (Probe) lets the
		// guest's first declaration resume instead of handshaking; the
		// daemon binds tickets to this guest's link.
		tlsConf.ClientSessionCache = c.sessionCache(pinned)
	}
	return &daemonConns{adv: a, link: c.opts.Link, tls: tlsConf, perRequest: c.opts.PerRequestTLS, idleTimeout: c.opts.IdleTimeout}
}

// sessionCache returns the session cache of the daemon whose certificate
// is pinned: the one of the previous advertisements if they pinned the same
// certificate, else a new one.
func (c *Client) sessionCache(pinned []byte) tls.ClientSessionCache {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sessions == nil || !bytes.Equal(c.sessionsPin, pinned) {
		c.sessions, c.sessionsPin = tls.NewLRUClientSessionCache(8), bytes.Clone(pinned)
	}
	return c.sessions
}

// Do sends method path (path may carry a query) with body to the daemon and
// returns its envelope. Errors wrap ErrNoAdvertisement, ErrUnreachable or
// ErrBadAnswer. A daemon error is not a Go error: it is an envelope of type
// "error".
func (c *Client) Do(ctx context.Context, method, path string, body []byte) (*devlxdapi.Response, error) {
	resp, err := c.Raw(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponse+1))
	if err != nil {
		return nil, fmt.Errorf("%w: reading answer to %s %s: %w", ErrUnreachable, method, path, err)
	}
	if len(data) > MaxResponse {
		return nil, fmt.Errorf("%w: answer to %s %s exceeds %d bytes", ErrBadAnswer, method, path, MaxResponse)
	}
	env, err := devlxdapi.ParseResponse(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %s (HTTP %d): %w", ErrBadAnswer, method, path, resp.StatusCode, err)
	}
	return env, nil
}

// Raw sends the request and returns the daemon's HTTP response as is (for
// answers that are not envelopes, such as image exports). The caller closes
// the body. The request is bounded by RequestTimeout unless ctx ends sooner;
// the bound covers reading the body.
func (c *Client) Raw(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	return c.RawAuth(ctx, method, path, body, "")
}

// RawAuth is Raw with the guest's Authorization header (a devlxd bearer
// token) forwarded to the daemon; "" sends none.
func (c *Client) RawAuth(ctx context.Context, method, path string, body []byte, authorization string) (*http.Response, error) {
	return c.RawHeader(ctx, method, path, body, Header{Authorization: authorization})
}

// Header is what the agent forwards of a guest's request headers; an
// empty field is not sent.
type Header struct {
	// Authorization is the guest's Authorization header (a devlxd bearer
	// token).
	Authorization string
	// IfMatch is the guest's If-Match header (an ETag of the trusted
	// devlxd API).
	IfMatch string
}

// RawHeader is Raw with the guest's headers h forwarded to the daemon.
func (c *Client) RawHeader(ctx context.Context, method, path string, body []byte, h Header) (*http.Response, error) {
	c.mu.RLock()
	dc := c.dc
	c.mu.RUnlock()
	if dc == nil {
		return nil, ErrNoAdvertisement
	}
	if err := checkRequest(method, path, h); err != nil {
		return nil, fmt.Errorf("building request %s %s: %w", method, path, err)
	}
	resp, err := dc.roundTrip(ctx, method, path, body, h)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %s: %w", ErrUnreachable, method, path, err)
	}
	return resp, nil
}

// Probe checks that the daemon answers GET /1.0: a 200 or a 403 (devlxd
// disabled) envelope counts as reachable.
func (c *Client) Probe(ctx context.Context) error {
	env, err := c.Do(ctx, http.MethodGet, "/1.0", nil)
	if err != nil {
		return err
	}
	if env.Type == devlxdapi.TypeError && env.ErrorCode != http.StatusForbidden {
		return fmt.Errorf("%w: GET /1.0 answered %d %q", ErrBadAnswer, env.ErrorCode, env.Error)
	}
	return nil
}

// Reach checks that the advertised daemon's link accepts a connection: it
// dials and closes without TLS or a request, which costs the daemon an
// accept and a close. It proves the daemon is there, not who it is (Probe
// does). Errors wrap ErrNoAdvertisement or ErrUnreachable.
func (c *Client) Reach(ctx context.Context) error {
	adv := c.Advertisement()
	if adv == nil {
		return ErrNoAdvertisement
	}
	ctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	conn, err := c.opts.Link.Dial(ctx, adv.CID, adv.Port)
	if err != nil {
		return fmt.Errorf("%w: dialing cid %d port %d: %w", ErrUnreachable, adv.CID, adv.Port, err)
	}
	conn.Close()
	return nil
}

// CloseIdleConnections closes pooled connections to the daemon.
func (c *Client) CloseIdleConnections() {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.dc != nil {
		c.dc.closeIdle()
	}
}
