package adminapi

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/internal/hangup"
	"github.com/guestlink/guestlink/link/guestpath"
)

// AgentRelay sends requests to the agents of running instances over their
// links (core/agentmon.Service). AgentDo streams the request's body and
// returns the agent's answer, whose body the caller reads and closes; it
// fails with errdefs.ErrConflict when the instance has no connected agent.
type AgentRelay interface {
	AgentDo(uuid string, req *http.Request) (*http.Response, error)
}

// fileHeaders are LXD's file headers, relayed both ways.
var fileHeaders = []string{"X-LXD-uid", "X-LXD-gid", "X-LXD-mode", "X-LXD-type", "X-LXD-write"}

// fileActions are the lifecycle actions of the file operations, by method.
var fileActions = map[string]string{
	http.MethodPost:   events.InstanceFilePushed,
	http.MethodGet:    events.InstanceFileRetrieved,
	http.MethodDelete: events.InstanceFileDeleted,
}

// maxAgentError is how much of an agent's error answer is relayed.
const maxAgentError = 64 << 10

// A refused push's answer is sent before its body is read, and the
// client is still sending: were the connection closed then, with the
// body unread, the client's next write would fail (a broken pipe, a
// reset) before it read the answer, and net/http's Transport (the Go
// client's, LXD's) reports that write error instead of the answer. So
// after the answer the rest of the body is read and dropped, Apache's
// lingering close, until the client closes (it has the answer), at most
// refusedBodyDrain bytes or refusedDrainTime.
const (
	refusedBodyDrain = 256 << 20
	refusedDrainTime = 10 * time.Second
)

// registerFiles adds GET, POST and DELETE /1.0/instances/{name}/files?path=,
// LXD's file routes, relayed to the instance's agent: an admin's only (a
// viewer may not read a guest's files either).
func (a *API) registerFiles(v1 fiber.Router) {
	v1.Get("/instances/:name/files", a.adminOnly, a.instanceFiles)
	v1.Post("/instances/:name/files", a.adminOnly, a.instanceFiles)
	v1.Delete("/instances/:name/files", a.adminOnly, a.instanceFiles)
}

// isFilePush reports whether c is a file push, whose body is streamed to
// the agent rather than read under the body limit.
func isFilePush(c *fiber.Ctx) bool {
	if c.Method() != http.MethodPost {
		return false
	}
	rest, ok := strings.CutPrefix(c.Path(), "/1.0/instances/")
	name, tail, _ := strings.Cut(rest, "/")
	return ok && name != "" && tail == "files"
}

// requestBody returns the request's body as a reader: the stream fasthttp
// hands over (StreamRequestBody) or the bytes it already read.
func requestBody(c *fiber.Ctx) io.Reader {
	if c.Request().IsBodyStream() {
		return c.Context().RequestBodyStream()
	}
	return bytes.NewReader(c.Body())
}

// errBodyReleased is what a relay reads from a request body after its
// handler returned.
var errBodyReleased = errors.New("the request's body was released: its handler returned")

// bodyGuard reads a request's body until release, and never after: release
// waits for a read in progress, then every read fails. One read or release
// at a time holds turn (a channel, so that a wait on it is one testing/synctest
// sees).
type bodyGuard struct {
	r        io.Reader
	turn     chan struct{} // of size 1; made on first use
	once     sync.Once
	released bool
}

func (g *bodyGuard) lock() {
	g.once.Do(func() { g.turn = make(chan struct{}, 1) })
	g.turn <- struct{}{}
}

func (g *bodyGuard) unlock() { <-g.turn }

// Read reads from the body unless it was released.
func (g *bodyGuard) Read(p []byte) (int, error) {
	g.lock()
	defer g.unlock()
	if g.released {
		return 0, errBodyReleased
	}
	return g.r.Read(p)
}

// release ends the reads (after the one in progress, if any).
func (g *bodyGuard) release() {
	g.lock()
	g.released = true
	g.unlock()
}

// limitBodies keeps the body limit now that request bodies are streamed
// (FiberConfig's StreamRequestBody, for file pushes): every request but a
// file push has its body read here, at most the app's BodyLimit bytes, and
// is answered 413 beyond it as before. It runs first, for every route of
// the app, the dashboard's included.
//
// A streamed file push is let through, and whatever answers it (the files
// handler, or a middleware before it: a 401 of authenticate, a viewer's
// 403, a host check, the request limit) answers it as the connection's
// last, then drains what the client still sends (answerThenDrain), so the
// client reads the refusal rather than a broken pipe. The drain is bounded
// for every client, an unauthenticated one included: refusedBodyDrain
// bytes and refusedDrainTime per connection, ending when the client closes.
func limitBodies(c *fiber.Ctx) error {
	req := c.Request()
	if !req.IsBodyStream() {
		return c.Next()
	}
	if isFilePush(c) {
		defer answerThenDrain(c)
		return c.Next()
	}
	limit := c.App().Config().BodyLimit
	if cl := req.Header.ContentLength(); cl > limit {
		c.Context().SetConnectionClose() // the body stays unread
		return fiber.ErrRequestEntityTooLarge
	}
	b, err := io.ReadAll(io.LimitReader(c.Context().RequestBodyStream(), int64(limit)+1))
	if err != nil {
		c.Context().SetConnectionClose()
		return badRequest("reading the request body: %v", err)
	}
	if len(b) > limit {
		c.Context().SetConnectionClose()
		return fiber.ErrRequestEntityTooLarge
	}
	req.SetBody(b)
	return c.Next()
}

// answerThenDrain makes c's answer, once the handlers have made it, the
// connection's last: fasthttp hands the connection over after the
// handlers, the answer is written with Connection: close and, unless it
// is a success (the body was read whole), what the client still sends is
// read and dropped (refusedBodyDrain, refusedDrainTime) before the
// connection closes, so the client reads the answer, not a broken pipe.
// limitBodies defers it for every streamed push, so that it covers the
// refusals of the middlewares before the handler too.
func answerThenDrain(c *fiber.Ctx) {
	fc := c.Context() // the connection's context lives on until the hijack returns
	fc.HijackSetNoResponse(true)
	fc.Hijack(func(conn net.Conn) {
		deadline := time.Now().Add(refusedDrainTime)
		_ = conn.SetDeadline(deadline)
		fc.Response.SetConnectionClose()
		bw := bufio.NewWriter(conn)
		if err := fc.Response.Write(bw); err != nil || bw.Flush() != nil {
			return
		}
		if fc.Response.StatusCode() < http.StatusMultipleChoices {
			return
		}
		// Until the client closes, the time is up or the bound is read.
		_, _ = io.CopyN(io.Discard, conn, refusedBodyDrain)
	})
}

// instanceFiles relays GET, POST and DELETE
// /1.0/instances/{name}/files?path= to the instance's agent: the path is
// checked here first (absolute, no NUL, no ".."), a push must be
// application/octet-stream (a browser page cannot send that cross-site
// without a preflight), and the bodies are streamed both ways. Each
// operation is logged with who asked, the instance, the path and the
// answer's status, and recorded in the instance's timeline with its
// lifecycle event (instance-file-pushed, -retrieved, -deleted).
func (a *API) instanceFiles(c *fiber.Ctx) error {
	if a.cfg.Agents == nil {
		return fiber.NewError(http.StatusNotImplemented, "this daemon relays no guest files")
	}
	name, err := nameParam(c)
	if err != nil {
		return err
	}
	if !c.Context().QueryArgs().Has("path") {
		return badRequest("missing path: give ?path=ABSOLUTE_PATH_IN_THE_GUEST")
	}
	p := c.Query("path")
	if _, err := guestpath.Clean(p); err != nil {
		return badRequest("%v", err)
	}
	method := c.Method()
	var body io.Reader
	length := int64(0)
	if method == http.MethodPost {
		ct := strings.ToLower(strings.TrimSpace(strings.Split(c.Get(fiber.HeaderContentType), ";")[0]))
		if ct != fiber.MIMEOctetStream {
			return fiber.NewError(http.StatusUnsupportedMediaType,
				fmt.Sprintf("content type %q is not accepted: send application/octet-stream", ct))
		}
		// The relay's writer (net/http's, in its own goroutine) may still
		// be reading the body when the agent has answered (a refusal
		// before the whole body): the guard ends its reads before this
		// handler returns and fasthttp releases the stream, which it
		// must never be read after (fasthttp panics: "reading released
		// body stream", and that goroutine's panic ended the daemon).
		// With a length, the body ends there without a read of the
		// stream (net/http reads past the length to check for extra
		// bytes, after the answer may have come).
		length = int64(c.Request().Header.ContentLength())
		r := requestBody(c)
		if length >= 0 {
			r = io.LimitReader(r, length)
		}
		guard := &bodyGuard{r: r}
		defer guard.release()
		body = guard
	}
	inst, err := a.cfg.Instances.Get(c.UserContext(), name)
	if err != nil {
		return err
	}
	by := requestor(c)
	ctx, stop := hangup.Context(c.UserContext(), c.Context().Conn())
	req, err := http.NewRequestWithContext(ctx, method, "/1.0/files?path="+url.QueryEscape(p), body)
	if err != nil {
		stop()
		return fmt.Errorf("relaying %s file %q of instance %q: %w", method, p, name, err)
	}
	if length >= 0 {
		req.ContentLength = length
	}
	if body != nil && length == 0 {
		req.Body = http.NoBody
	}
	for _, h := range fileHeaders {
		if v := c.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	access := instance.GuestAccess{Action: fileActions[method], Path: p}
	resp, err := a.cfg.Agents.AgentDo(inst.UUID, req)
	if err != nil {
		stop()
		a.log.Info("guest file", "op", method, "instance", name, "path", p, "by", by.Describe(), "err", err)
		access.Err = err.Error()
		a.recordAccess(name, access, by)
		return fmt.Errorf("%s file %q of instance %q: %w", method, p, name, err)
	}
	a.log.Info("guest file", "op", method, "instance", name, "path", p, "by", by.Describe(), "status", resp.StatusCode)
	access.Status = resp.StatusCode
	a.recordAccess(name, access, by)
	for _, h := range fileHeaders {
		if v := resp.Header.Get(h); v != "" {
			c.Set(h, v)
		}
	}
	c.Status(resp.StatusCode)
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		c.Set(fiber.HeaderContentType, ct)
	}
	if resp.StatusCode != http.StatusOK || method != http.MethodGet {
		// An envelope: small.
		defer stop()
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxAgentError))
		if err != nil {
			return fmt.Errorf("%s file %q of instance %q: reading the agent's answer: %w", method, p, name, err)
		}
		return c.Send(b)
	}
	size := -1
	if resp.ContentLength >= 0 {
		size = int(resp.ContentLength)
	}
	c.Set(fiber.HeaderCacheControl, "no-store")
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	c.Context().SetBodyStream(&cancelOnClose{ReadCloser: resp.Body, cancel: context.CancelFunc(stop)}, size)
	return nil
}
