// Package devlxdclient is a minimal client of /dev/lxd/sock, used by the
// agent's client subcommands (ready, started, wait-host) and by benchmarks.
package devlxdclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/guestlink/guestlink/link/devlxdapi"
)

// ErrStatus is wrapped when the socket answered with an error status.
var ErrStatus = errors.New("devlxd error")

// New returns an HTTP client that sends every request to the Unix socket at
// path (the URL host is ignored, as by devlxd). It keeps connections alive.
func New(path string) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", path)
			},
			MaxIdleConnsPerHost: 8,
			IdleConnTimeout:     20 * time.Second,
		},
	}
}

// Get sends GET http://lxd<path> and returns the body of a 200 answer.
func Get(ctx context.Context, c *http.Client, path string) ([]byte, error) {
	return do(ctx, c, http.MethodGet, path, nil)
}

func do(ctx context.Context, c *http.Client, method, path string, body []byte) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://lxd"+path, rd)
	if err != nil {
		return nil, fmt.Errorf("building %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return nil, fmt.Errorf("reading answer to %s %s: %w", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: %w %d: %s", method, path, ErrStatus, resp.StatusCode, strings.TrimSpace(string(data)))
	}
	return data, nil
}

// Declare sends PATCH /1.0 {"state":state} ("Ready" or "Started").
func Declare(ctx context.Context, c *http.Client, state string) error {
	return DeclareWith(ctx, c, devlxdapi.StatePut{State: state})
}

// DeclareWith sends PATCH /1.0 with put: a state and guestlink's optional
// reason and message (state "Degraded" too).
func DeclareWith(ctx context.Context, c *http.Client, put devlxdapi.StatePut) error {
	body, err := json.Marshal(put)
	if err != nil {
		return fmt.Errorf("encoding state: %w", err)
	}
	_, err = do(ctx, c, http.MethodPatch, "/1.0", body)
	return err
}

// WaitHost polls GET /1.0 until it answers 200 or ctx ends; it returns the
// last failure when ctx ends.
func WaitHost(ctx context.Context, c *http.Client) error {
	var last error
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := Get(actx, c, "/1.0")
		cancel()
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the host: %w (last: %w)", ctx.Err(), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
