package adminapi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/core/console"
	"github.com/guestlink/guestlink/core/listener"
	"github.com/guestlink/guestlink/errdefs"
)

// Consoles finds the console logs of instances (core/instance.Manager).
// ConsoleLog returns the absolute path of the log of the instance called
// name, "" when its guest was never created, errdefs.ErrNotFound for an
// unknown instance and errdefs.ErrNotSupported for a backend without one.
type Consoles interface {
	ConsoleLog(ctx context.Context, name string) (string, error)
}

// Console headers: where the bytes of an answer of GET
// /1.0/instances/{name}/console start in the log, and how long the log was
// when the answer began. A client that wants only what follows asks again
// with ?offset=<start + bytes received>.
const (
	HeaderConsoleOffset = "X-Guestlink-Console-Offset"
	HeaderConsoleSize   = "X-Guestlink-Console-Size"
)

// registerConsole adds the console route: GET
// /1.0/instances/{name}/console answers the log's bytes as
// application/octet-stream (what `lxc console --show-log` reads), from
// ?offset=N or the last ?tail=N bytes, at most ?limit=N; ?follow=true keeps
// the answer open and streams what the guest prints until the client goes,
// the instance is deleted or the daemon stops. The route answers without
// the wrapper (httpwrap): its answer is the log's bytes, streamed, not a
// value in the sync envelope; its errors still reach writeError.
func (a *API) registerConsole(v1 fiber.Router) {
	v1.Get("/instances/:name/console", a.getConsole)
}

// byteQuery reads a non-negative integer query parameter (0 when absent).
func byteQuery(c *fiber.Ctx, key string) (int64, error) {
	v := c.Query(key)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, badRequest("invalid %s %q: want a byte count, a non-negative integer", key, v)
	}
	return n, nil
}

// getConsole answers GET /1.0/instances/{name}/console.
func (a *API) getConsole(c *fiber.Ctx) error {
	if a.cfg.Consoles == nil {
		return fiber.NewError(http.StatusNotImplemented, "this daemon serves no console logs")
	}
	name, err := nameParam(c)
	if err != nil {
		return err
	}
	offset, err := byteQuery(c, "offset")
	if err != nil {
		return err
	}
	tail, err := byteQuery(c, "tail")
	if err != nil {
		return err
	}
	limit, err := byteQuery(c, "limit")
	if err != nil {
		return err
	}
	if c.Query("offset") != "" && c.Query("tail") != "" {
		return badRequest("offset and tail exclude each other: give one")
	}
	follow, err := boolQuery(c, "follow")
	if err != nil {
		return err
	}
	if follow && limit > 0 {
		return badRequest("limit does not apply to follow: a followed console has no end")
	}
	path, err := a.cfg.Consoles.ConsoleLog(c.UserContext(), name)
	if err != nil {
		return fmt.Errorf("reading console of instance %q: %w", name, err)
	}
	r, rg, err := console.Open(path, offset, tail, limit)
	if err != nil {
		return fmt.Errorf("reading console of instance %q: %w", name, err)
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEOctetStream)
	c.Set(fiber.HeaderCacheControl, "no-store")
	c.Set(HeaderConsoleOffset, strconv.FormatInt(rg.Start, 10))
	c.Set(HeaderConsoleSize, strconv.FormatInt(rg.Size, 10))
	if !follow {
		// fasthttp streams the range and closes the file.
		c.Context().SetBodyStream(r, int(rg.Len()))
		return nil
	}
	r.Close()
	if path == "" {
		return fmt.Errorf("following console of instance %q: its guest was never started: %w", name, errdefs.ErrConflict)
	}
	select {
	case <-a.closing:
		return fiber.NewError(http.StatusServiceUnavailable, "the daemon is shutting down")
	default:
	}
	c.Set("X-Accel-Buffering", "no")
	recheck, _ := c.Locals(recheckKey).(recheckFunc)
	conn, writeTimeout := c.Context().Conn(), c.App().Config().WriteTimeout
	a.streams.Add(1)
	c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
		defer a.streams.Add(-1)
		// Each flush extends the write deadline: the stream lasts as long
		// as the client reads it, one that stops reading is dropped.
		w = listener.StreamWriter(w, conn, writeTimeout)
		ctx, cancel := a.untilClosing()
		defer cancel()
		if w.Flush() != nil {
			return
		}
		// A revoked token or certificate ends the stream within one ping
		// interval, whether the guest prints or not.
		checked := time.Now()
		check := func() error {
			if recheck == nil || time.Since(checked) < a.cfg.PingInterval {
				return nil
			}
			checked = time.Now()
			rctx, cancel := context.WithTimeout(context.Background(), writeWait)
			defer cancel()
			if err := recheck(rctx); errors.Is(err, errdefs.ErrUnauthorized) {
				return fmt.Errorf("credentials revoked or expired: %w", err)
			}
			return nil
		}
		err := console.Follow(ctx, path, rg.Start, console.FollowOptions{Idle: check}, func(ch console.Chunk) error {
			if err := check(); err != nil {
				return err
			}
			if _, err := w.Write(ch.Data); err != nil {
				return err
			}
			return w.Flush()
		})
		if err != nil {
			// The client went (a failed write) or the instance was
			// deleted (its log removed): the stream ends either way.
			a.log.Debug("console stream ended", "instance", name, "err", err)
		}
	})
	return nil
}
