// Package client is the Go client of guestlink's admin API, over the
// daemon's Unix socket or a localhost TCP address. The CLI, tests and
// benchmarks use it. Methods the CLI does not call (ServerInfo, State,
// Timeline, Certificate) are public API for tests and users, and stay: the
// tests call them.
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	gojson "github.com/goccy/go-json"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/errdefs"
)

// StatusError is an error answer of the API: the HTTP status and the
// envelope's message. Match it with errors.As; errors.Is also matches the
// errdefs kind the status stands for (404 errdefs.ErrNotFound, 409
// errdefs.ErrConflict and errdefs.ErrAlreadyExists, ...).
type StatusError struct {
	Code    int
	Message string
}

// Error returns the API's message.
func (e *StatusError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("%d %s", e.Code, http.StatusText(e.Code))
	}
	return e.Message
}

// Is reports whether target is the errdefs kind of the status code.
func (e *StatusError) Is(target error) bool {
	switch e.Code {
	case http.StatusNotFound:
		return target == errdefs.ErrNotFound
	case http.StatusConflict:
		return target == errdefs.ErrConflict || target == errdefs.ErrAlreadyExists
	case http.StatusBadRequest:
		return target == errdefs.ErrInvalid
	case http.StatusForbidden:
		return target == errdefs.ErrForbidden
	case http.StatusUnauthorized:
		return target == errdefs.ErrUnauthorized
	case http.StatusNotImplemented:
		return target == errdefs.ErrNotSupported
	case http.StatusServiceUnavailable:
		return target == errdefs.ErrUnavailable
	case http.StatusInsufficientStorage:
		return target == errdefs.ErrNoSpace
	}
	return false
}

// Client talks to one daemon. It is safe for concurrent use.
type Client struct {
	base   string // "http://host:port", "https://host:port" or "http://unix"
	wsBase string // "ws://host:port", "wss://host:port" or "ws://unix"
	dial   func(ctx context.Context, network, addr string) (net.Conn, error)
	tls    *tls.Config // https only
	token  string      // bearer token, "" for none
	http   *http.Client
	addr   string
}

// Options are the credentials of a TCP client; the zero value sends none
// (only the Unix socket then lets requests through).
type Options struct {
	// Token is sent as "Authorization: Bearer TOKEN" (http or https).
	Token string
	// Certificate is the client certificate presented over https.
	Certificate *tls.Certificate
	// ServerFingerprint pins the daemon's certificate over https: the
	// SHA-256 of its DER in hex (colons and a "sha256:" prefix are
	// accepted). Without it the certificate must verify against the
	// system's roots.
	ServerFingerprint string
}

// New returns a client of the daemon at addr: a Unix socket path (or
// "unix://" followed by the path), or an "http://host:port" or
// "https://host:port" URL. It sends no credentials: see NewWithOptions.
func New(addr string) (*Client, error) { return NewWithOptions(addr, Options{}) }

// NewWithOptions returns a client of the daemon at addr (as New) that
// authenticates with opts on TCP.
func NewWithOptions(addr string, opts Options) (*Client, error) {
	if addr == "" {
		return nil, fmt.Errorf("creating API client: empty address: %w", errdefs.ErrInvalid)
	}
	if strings.ContainsAny(opts.Token, "\r\n") {
		return nil, fmt.Errorf("creating API client for %q: the token contains a line break: %w", addr, errdefs.ErrInvalid)
	}
	c := &Client{addr: addr, token: opts.Token}
	var d net.Dialer
	switch {
	case strings.HasPrefix(addr, "http://"), strings.HasPrefix(addr, "https://"):
		u, err := url.Parse(addr)
		if err != nil || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return nil, fmt.Errorf("creating API client for %q: want http(s)://host:port: %w", addr, errdefs.ErrInvalid)
		}
		c.base = u.Scheme + "://" + u.Host
		c.wsBase = "ws://" + u.Host
		c.dial = d.DialContext
		if u.Scheme == "https" {
			c.wsBase = "wss://" + u.Host
			cfg, err := clientTLS(u.Hostname(), opts)
			if err != nil {
				return nil, fmt.Errorf("creating API client for %q: %w", addr, err)
			}
			c.tls = cfg
		}
	default:
		path := strings.TrimPrefix(addr, "unix://")
		c.addr = path
		c.base, c.wsBase = "http://unix", "ws://unix"
		c.dial = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", path)
		}
	}
	c.http = &http.Client{Transport: &http.Transport{
		DialContext:         c.dial,
		TLSClientConfig:     c.tls,
		ForceAttemptHTTP2:   false,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     30 * time.Second,
	}}
	return c, nil
}

// Close releases the client's idle connections.
func (c *Client) Close() {
	c.http.CloseIdleConnections()
}

// do sends a request and decodes the answer's metadata into out (if not
// nil). API errors are *StatusError.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	target := c.base + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	var payload []byte
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encoding %s %s request: %w", method, path, err)
		}
		payload = b
	}
	deadline := time.Now().Add(busyRetryFor)
	for {
		var r io.Reader
		if payload != nil {
			r = bytes.NewReader(payload)
		}
		req, err := http.NewRequestWithContext(ctx, method, target, r)
		if err != nil {
			return fmt.Errorf("building %s %s request: %w", method, path, err)
		}
		if payload != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		c.authorize(req.Header)
		resp, err := c.http.Do(req)
		if err != nil {
			return fmt.Errorf("%s %s: daemon %w at %s: %w", method, path, errdefs.ErrUnavailable, c.addr, unwrapURLError(err))
		}
		if wait, ok := busy(resp); ok && time.Now().Add(wait).Before(deadline) {
			// Refused before it ran (the daemon's request limit): nothing
			// happened, so any request may be sent again.
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
			resp.Body.Close()
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("%s %s: the daemon is busy: %w", method, path, ctx.Err())
			case <-t.C:
			}
			continue
		}
		defer resp.Body.Close()
		return decodeResponse(resp, method+" "+path, out)
	}
}

// busyRetryFor bounds how long a request refused as busy (503 with
// Retry-After) is sent again before the refusal is returned.
const busyRetryFor = 30 * time.Second

// busy reports whether resp is the daemon's "busy" refusal (503 with
// Retry-After, in seconds) and how long it asks to wait (at most 5 s).
func busy(resp *http.Response) (time.Duration, bool) {
	if resp.StatusCode != http.StatusServiceUnavailable {
		return 0, false
	}
	secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || secs < 0 {
		return 0, false
	}
	return min(time.Duration(secs)*time.Second, 5*time.Second), true
}

// unwrapURLError drops net/http's *url.Error wrapper, whose message repeats
// the made-up URL of Unix socket requests.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// decodeResponse reads an envelope: an error envelope (or any non-2xx
// answer) becomes *StatusError, a sync one fills out. A 2xx answer is parsed
// once: the metadata is decoded into out while the envelope is read.
func decodeResponse(resp *http.Response, what string, out any) error {
	raw, err := readBody(resp)
	if err != nil {
		return fmt.Errorf("reading answer of %s: %w", what, err)
	}
	if resp.StatusCode >= 300 {
		return statusError(resp.StatusCode, raw)
	}
	if list, ok := out.(*[]api.Instance); ok {
		// The instance list (4 MiB for 10,000 stopped instances, 12 MiB
		// for 10,000 running ones) is decoded by its own parser
		// (decodeInstanceList), else by goccy/go-json, about twice as
		// fast as encoding/json, with the same result
		// (TestDecodeInstanceListMatchesEncodingJSON); anything both
		// refuse goes the common way below, for encoding/json's errors. The
		// strings without escapes are not copied out of raw, which is
		// this answer's alone and never reused: 30 of them per running
		// instance were a quarter of the decoding's time.
		if l, ok := decodeInstanceList(raw); ok {
			if l != nil { // null metadata leaves out alone, as encoding/json does
				*list = l
			}
			return nil
		}
		var env api.Response[[]api.Instance]
		if err := gojson.UnmarshalWithOption(raw, &env, gojson.DecodeNoCopyString()); err == nil && env.Type == api.TypeSync {
			if env.Metadata != nil { // null metadata leaves out alone, as encoding/json does
				*list = env.Metadata
			}
			return nil
		}
	}
	// encoding/json decodes into the pointer an interface holds: the
	// metadata is decoded into out in the same pass as the envelope.
	env := api.Response[any]{Metadata: out}
	if out == nil {
		env.Metadata = &json.RawMessage{} // validated, then dropped
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && env.Type == api.TypeError {
			return statusError(resp.StatusCode, raw)
		}
		return fmt.Errorf("decoding answer of %s: %w", what, err)
	}
	if env.Type == api.TypeError {
		return statusError(resp.StatusCode, raw)
	}
	return nil
}

// readBody reads an answer's body (at most 64 MiB) into one buffer, sized
// from Content-Length when the daemon sent one.
func readBody(resp *http.Response) ([]byte, error) {
	const limit = 64 << 20
	if n := resp.ContentLength; n > 0 && n <= limit {
		buf := make([]byte, n)
		if _, err := io.ReadFull(resp.Body, buf); err != nil {
			return nil, err
		}
		return buf, nil
	}
	return io.ReadAll(io.LimitReader(resp.Body, limit))
}

// statusError turns an error answer into *StatusError: the envelope's code
// and message when the body is one, else the HTTP status and the body.
func statusError(httpCode int, raw []byte) error {
	var env api.Response[json.RawMessage]
	if err := json.Unmarshal(raw, &env); err != nil {
		return &StatusError{Code: httpCode, Message: strings.TrimSpace(string(raw))}
	}
	code := httpCode
	if env.ErrorCode != 0 {
		code = env.ErrorCode
	}
	return &StatusError{Code: code, Message: env.Error}
}

// instancePath returns the escaped path of an instance resource.
func instancePath(name string, sub ...string) string {
	p := "/1.0/instances/" + url.PathEscape(name)
	for _, s := range sub {
		p += "/" + s
	}
	return p
}

// ServerInfo returns GET /1.0.
func (c *Client) ServerInfo(ctx context.Context) (*api.ServerInfo, error) {
	var info api.ServerInfo
	if err := c.do(ctx, http.MethodGet, "/1.0", nil, nil, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// InstanceFilter selects instances in Instances; empty fields match all.
// Status "Running" includes Ready instances.
type InstanceFilter struct {
	Status  string
	Backend string
	Agent   string
	Query   string // substring of the name
}

// listQuery returns the query of a list request for f.
func (f InstanceFilter) listQuery() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"status": f.Status, "backend": f.Backend, "agent": f.Agent, "q": f.Query} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

// Instances lists the instances matching f as full objects
// (?recursion=1). The strings of the list share the memory of the daemon's
// answer (one buffer, about 1.3 KB per running instance): a caller that
// keeps a few of them out of a long list, and not the list, keeps that
// buffer alive; strings.Clone them to keep less. InstanceNames and
// InstanceSummaries cost a fraction of it.
func (c *Client) Instances(ctx context.Context, f InstanceFilter) ([]api.Instance, error) {
	q := f.listQuery()
	q.Set("recursion", "1")
	var list []api.Instance
	if err := c.do(ctx, http.MethodGet, "/1.0/instances", q, nil, &list); err != nil {
		return nil, err
	}
	return list, nil
}

// InstanceNames lists the names of the instances matching f, from LXD's
// URL list (?recursion=0).
func (c *Client) InstanceNames(ctx context.Context, f InstanceFilter) ([]string, error) {
	var urls []string
	if err := c.do(ctx, http.MethodGet, "/1.0/instances", f.listQuery(), nil, &urls); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(urls))
	for _, u := range urls {
		name, ok := strings.CutPrefix(u, "/1.0/instances/")
		if !ok || name == "" {
			return nil, fmt.Errorf("listing instance names: unexpected URL %q in the answer", u)
		}
		if n, err := url.PathUnescape(name); err == nil {
			name = n
		}
		names = append(names, name)
	}
	return names, nil
}

// InstanceSummaries lists the instances matching f with only the named
// top-level keys of the instance object filled (?recursion=1&fields=...;
// docs/admin-api.md names them): what a table needs.
func (c *Client) InstanceSummaries(ctx context.Context, f InstanceFilter, fields ...string) ([]api.Instance, error) {
	if len(fields) == 0 {
		return nil, fmt.Errorf("listing instance summaries: %w: no field named", errdefs.ErrInvalid)
	}
	q := f.listQuery()
	q.Set("recursion", "1")
	q.Set("fields", strings.Join(fields, ","))
	var list []api.Instance
	if err := c.do(ctx, http.MethodGet, "/1.0/instances", q, nil, &list); err != nil {
		return nil, err
	}
	return list, nil
}

// Instance returns one instance with its timeline summary.
func (c *Client) Instance(ctx context.Context, name string) (*api.Instance, error) {
	var inst api.Instance
	if err := c.do(ctx, http.MethodGet, instancePath(name), nil, nil, &inst); err != nil {
		return nil, err
	}
	return &inst, nil
}

// Create creates an instance (and starts it if req.Start).
func (c *Client) Create(ctx context.Context, req api.InstancesPost) (*api.Instance, error) {
	var inst api.Instance
	var q url.Values
	if req.Target != "" {
		q = url.Values{"target": {req.Target}}
	}
	if err := c.do(ctx, http.MethodPost, "/1.0/instances", q, req, &inst); err != nil {
		return nil, err
	}
	return &inst, nil
}

// UpdateConfig sets and unsets config keys of an instance.
func (c *Client) UpdateConfig(ctx context.Context, name string, set map[string]string, unset []string) (*api.Instance, error) {
	var inst api.Instance
	body := api.InstancePatch{Config: set, Unset: unset}
	if err := c.do(ctx, http.MethodPatch, instancePath(name), nil, body, &inst); err != nil {
		return nil, err
	}
	return &inst, nil
}

// State returns an instance's state.
func (c *Client) State(ctx context.Context, name string) (*api.InstanceState, error) {
	var st api.InstanceState
	if err := c.do(ctx, http.MethodGet, instancePath(name, "state"), nil, nil, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// SetState starts, stops or restarts an instance and returns its state
// afterwards.
func (c *Client) SetState(ctx context.Context, name string, req api.InstanceStatePut) (*api.InstanceState, error) {
	var st api.InstanceState
	if err := c.do(ctx, http.MethodPut, instancePath(name, "state"), nil, req, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Delete deletes an instance; force deletes a running one.
func (c *Client) Delete(ctx context.Context, name string, force bool) error {
	var q url.Values
	if force {
		q = url.Values{"force": {"true"}}
	}
	return c.do(ctx, http.MethodDelete, instancePath(name), q, nil, nil)
}

// Timeline returns an instance's latest timeline entries, oldest first
// (limit 0: the server's default).
func (c *Client) Timeline(ctx context.Context, name string, limit int) ([]api.TimelineEntry, error) {
	var q url.Values
	if limit != 0 {
		q = url.Values{"limit": {strconv.Itoa(limit)}}
	}
	var tl []api.TimelineEntry
	if err := c.do(ctx, http.MethodGet, instancePath(name, "timeline"), q, nil, &tl); err != nil {
		return nil, err
	}
	return tl, nil
}

// Backends lists the backend plugins and their health.
func (c *Client) Backends(ctx context.Context) ([]api.Backend, error) {
	var list []api.Backend
	if err := c.do(ctx, http.MethodGet, "/1.0/backends", nil, nil, &list); err != nil {
		return nil, err
	}
	return list, nil
}

// Wait waits, on the daemon, until instance name meets what (api.WaitReady,
// api.WaitAgentConnected, api.WaitRunning, api.WaitStopped), can no longer
// meet it, or timeout passes; the answer's Outcome says which. ctx should
// outlast timeout. An unknown instance is an error wrapping
// errdefs.ErrNotFound.
func (c *Client) Wait(ctx context.Context, name, what string, timeout time.Duration) (*api.InstanceWait, error) {
	q := url.Values{"for": {what}, "timeout": {timeout.String()}}
	var w api.InstanceWait
	if err := c.do(ctx, http.MethodGet, instancePath(name, "wait"), q, nil, &w); err != nil {
		return nil, err
	}
	return &w, nil
}
