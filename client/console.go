package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/guestlink/guestlink/errdefs"
)

// ConsoleOptions select the part of a console log that Console returns.
type ConsoleOptions struct {
	// Offset is the byte to start at; Tail > 0 asks for the last Tail bytes
	// instead (give one of the two).
	Offset, Tail int64
	// Follow keeps the stream open: it carries what the guest prints until
	// ctx ends, the instance is deleted or the daemon stops.
	Follow bool
}

// Console returns the console log of the instance called name (GET
// /1.0/instances/{name}/console), streamed: the caller reads and closes
// it. API errors are *StatusError.
func (c *Client) Console(ctx context.Context, name string, opts ConsoleOptions) (io.ReadCloser, error) {
	q := url.Values{}
	if opts.Offset > 0 {
		q.Set("offset", strconv.FormatInt(opts.Offset, 10))
	}
	if opts.Tail > 0 {
		q.Set("tail", strconv.FormatInt(opts.Tail, 10))
	}
	if opts.Follow {
		q.Set("follow", "true")
	}
	path := instancePath(name, "console")
	target := c.base + path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, fmt.Errorf("building GET %s request: %w", path, err)
	}
	c.authorize(req.Header)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: daemon %w at %s: %w", path, errdefs.ErrUnavailable, c.addr, unwrapURLError(err))
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		raw, err := readBody(resp)
		if err != nil {
			return nil, fmt.Errorf("reading answer of GET %s: %w", path, err)
		}
		return nil, statusError(resp.StatusCode, raw)
	}
	return resp.Body, nil
}
