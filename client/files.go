package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/errdefs"
)

// Types of a guest file (LXD's X-LXD-type).
const (
	FileTypeFile      = "file"
	FileTypeDirectory = "directory"
	FileTypeSymlink   = "symlink"
)

// FileArgs are the headers of a push: what to create and with which owner
// and mode. Nil fields leave the owner as is (a new file is the agent's)
// and give the mode of an existing file or LXD's default (0644, 0755).
type FileArgs struct {
	// Type is FileTypeFile (also for ""), FileTypeDirectory or
	// FileTypeSymlink (the body is then the target).
	Type string
	UID  *int
	GID  *int
	Mode *fs.FileMode
	// Append appends to the file instead of replacing it.
	Append bool
}

// File is a pulled guest path: for a file, Body to read and close (Size
// bytes); for a directory, its Entries; for a symlink, its Target.
type File struct {
	Type    string
	UID     int
	GID     int
	Mode    fs.FileMode // permission bits (and setuid, setgid, sticky as fs modes)
	Size    int64       // -1 when unknown
	Body    io.ReadCloser
	Entries []string
	Target  string
}

func filesTarget(c *Client, name, path string) string {
	return c.base + instancePath(name, "files") + "?path=" + url.QueryEscape(path)
}

// fileDo sends one file request; a non-2xx answer is a *StatusError.
func (c *Client) fileDo(req *http.Request, what string) (*http.Response, error) {
	c.authorize(req.Header)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: daemon %w at %s: %w", what, errdefs.ErrUnavailable, c.addr, unwrapURLError(err))
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		raw, err := readBody(resp)
		if err != nil {
			return nil, fmt.Errorf("reading answer of %s: %w", what, err)
		}
		return nil, statusError(resp.StatusCode, raw)
	}
	return resp, nil
}

// PushFile writes body to path inside the instance's guest (POST
// /1.0/instances/{name}/files?path=), streamed: size is the body's length
// (-1 when unknown: sent chunked). API errors are *StatusError.
func (c *Client) PushFile(ctx context.Context, name, path string, body io.Reader, size int64, args FileArgs) error {
	what := fmt.Sprintf("pushing %q to instance %q", path, name)
	if body == nil {
		body, size = http.NoBody, 0
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, filesTarget(c, name, path), body)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	req.ContentLength = size
	if size == 0 {
		req.Body = http.NoBody
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	if args.Type != "" {
		req.Header.Set("X-LXD-type", args.Type)
	}
	if args.UID != nil {
		req.Header.Set("X-LXD-uid", strconv.Itoa(*args.UID))
	}
	if args.GID != nil {
		req.Header.Set("X-LXD-gid", strconv.Itoa(*args.GID))
	}
	if args.Mode != nil {
		req.Header.Set("X-LXD-mode", FormatMode(*args.Mode))
	}
	if args.Append {
		req.Header.Set("X-LXD-write", "append")
	}
	resp, err := c.fileDo(req, what)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// FormatMode writes a mode as LXD's X-LXD-mode: four octal digits
// (api.FormatFileMode).
func FormatMode(m fs.FileMode) string { return api.FormatFileMode(m) }

// ParseMode reads an octal mode (up to 07777) as FormatMode writes it; its
// error is errdefs.ErrInvalid.
func ParseMode(s string) (fs.FileMode, error) {
	m, err := api.ParseFileMode(s)
	if err != nil {
		return 0, fmt.Errorf("invalid %w: %w", err, errdefs.ErrInvalid)
	}
	return m, nil
}

// PullFile reads path inside the instance's guest (GET
// /1.0/instances/{name}/files?path=). A file's Body is streamed: the
// caller reads and closes it. API errors are *StatusError.
func (c *Client) PullFile(ctx context.Context, name, path string) (*File, error) {
	what := fmt.Sprintf("pulling %q from instance %q", path, name)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, filesTarget(c, name, path), nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	resp, err := c.fileDo(req, what)
	if err != nil {
		return nil, err
	}
	f := &File{Type: resp.Header.Get("X-LXD-type"), Size: resp.ContentLength}
	f.UID, _ = strconv.Atoi(resp.Header.Get("X-LXD-uid"))
	f.GID, _ = strconv.Atoi(resp.Header.Get("X-LXD-gid"))
	if m, err := ParseMode(resp.Header.Get("X-LXD-mode")); err == nil {
		f.Mode = m
	}
	switch f.Type {
	case FileTypeDirectory:
		defer resp.Body.Close()
		raw, err := readBody(resp)
		if err != nil {
			return nil, fmt.Errorf("reading answer of %s: %w", what, err)
		}
		var env api.Response[[]string]
		if err := json.Unmarshal(raw, &env); err != nil {
			return nil, fmt.Errorf("decoding answer of %s: %w", what, err)
		}
		f.Entries = env.Metadata
	case FileTypeSymlink:
		defer resp.Body.Close()
		raw, err := io.ReadAll(io.LimitReader(resp.Body, 4097))
		if err != nil {
			return nil, fmt.Errorf("reading answer of %s: %w", what, err)
		}
		f.Target = string(raw)
	case FileTypeFile:
		f.Body = resp.Body
	default:
		resp.Body.Close()
		return nil, fmt.Errorf("%s: unknown X-LXD-type %q", what, f.Type)
	}
	return f, nil
}

// DeleteFile removes path (a file, a symlink or an empty directory) inside
// the instance's guest. API errors are *StatusError.
func (c *Client) DeleteFile(ctx context.Context, name, path string) error {
	what := fmt.Sprintf("deleting %q in instance %q", path, name)
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, filesTarget(c, name, path), nil)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	resp, err := c.fileDo(req, what)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// SplitInstancePath splits "NAME/PATH" into the instance name and the
// absolute guest path ("NAME/etc/hosts" is "NAME", "/etc/hosts").
func SplitInstancePath(s string) (name, path string, err error) {
	name, rest, ok := strings.Cut(s, "/")
	if !ok || name == "" {
		return "", "", fmt.Errorf("invalid target %q: want NAME/PATH: %w", s, errdefs.ErrInvalid)
	}
	return name, "/" + rest, nil
}
