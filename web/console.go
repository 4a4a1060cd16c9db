package web

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/core/console"
	"github.com/guestlink/guestlink/core/listener"
	"github.com/guestlink/guestlink/web/ansi"
	"github.com/guestlink/guestlink/web/components"
)

// Consoles finds the console logs of instances (core/instance.Manager).
// ConsoleLog returns the absolute path of the log of the instance called
// name, "" when its guest was never created, errdefs.ErrNotFound for an
// unknown instance and errdefs.ErrNotSupported for a backend without one.
type Consoles interface {
	ConsoleLog(ctx context.Context, name string) (string, error)
}

// Bounds of the console on the instance page: the page opens with the last
// ConsoleTail bytes of the log; the live stream sends at most
// ConsoleMaxLag bytes per ConsolePoll and skips the rest (saying how much),
// so a guest printing megabytes a second keeps the page responsive; the
// page keeps the last ConsoleScrollback characters (console.js).
const (
	ConsoleTail       = 64 << 10
	ConsoleMaxLag     = 16 << 10
	ConsolePoll       = 250 * time.Millisecond
	ConsoleScrollback = 256 << 10
)

// consoleView reads the tail of an instance's console for its page.
func (d *Dashboard) consoleView(ctx context.Context, name string) components.ConsoleView {
	v := components.ConsoleView{Stream: "/instances/" + name + "/console/stream", Download: "/instances/" + name + "/console.log", Scrollback: ConsoleScrollback}
	if d.cfg.Consoles == nil {
		v.Err = "this dashboard serves no console logs"
		return v
	}
	path, err := d.cfg.Consoles.ConsoleLog(ctx, name)
	if err != nil {
		v.Err = d.errorText("/instances/"+name+" console", err)
		return v
	}
	v.Available = true
	r, rg, err := console.Open(path, 0, ConsoleTail, 0)
	if err != nil {
		v.Err = d.errorText("/instances/"+name+" console", err)
		return v
	}
	defer r.Close()
	b, err := io.ReadAll(r) // at most ConsoleTail bytes
	if err != nil {
		v.Err = fmt.Sprintf("reading console log: %v", err)
		return v
	}
	if rg.Start > 0 {
		// Start on a line of its own rather than in the middle of one.
		if i := strings.IndexByte(string(b), '\n'); i >= 0 && i < len(b)-1 {
			b = b[i+1:]
		}
		v.Skipped = rg.Size - int64(len(b))
	}
	var p ansi.Parser
	v.Segments = p.Feed(b)
	v.Offset = rg.End
	return v
}

// consoleDownload answers GET /instances/{name}/console.log: the whole log
// as a file, streamed from disk as it was when the request came.
func (d *Dashboard) consoleDownload(c *fiber.Ctx) error {
	if d.cfg.Consoles == nil {
		return d.fail(c, fiber.NewError(http.StatusNotImplemented, "this dashboard serves no console logs"))
	}
	name := c.Params("name")
	path, err := d.cfg.Consoles.ConsoleLog(c.UserContext(), name)
	if err != nil {
		return d.fail(c, err)
	}
	r, rg, err := console.Open(path, 0, 0, 0)
	if err != nil {
		return d.fail(c, err)
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEOctetStream)
	c.Set(fiber.HeaderContentDisposition, `attachment; filename="`+name+`-console.log"`)
	c.Set("Cache-Control", "no-store")
	c.Context().SetBodyStream(r, int(rg.Len()))
	return nil
}

// consoleMessage is one "console" event of the console stream: text
// segments, the log offset after them (also the event id, which a
// reconnecting page resumes from) and how many bytes were skipped before
// them.
type consoleMessage struct {
	Offset  int64 `json:"o"`
	Skipped int64 `json:"s,omitempty"`
	// Reset says the log started again (a new QEMU boot truncated it).
	Reset    bool           `json:"r,omitempty"`
	Segments []ansi.Segment `json:"g"`
}

// consoleStream answers GET /instances/{name}/console/stream?from=N: the
// console from offset N (or the Last-Event-ID a reconnect sends) as
// server-sent "console" events, until the page goes, the session ends, the
// instance is deleted or the dashboard closes.
func (d *Dashboard) consoleStream(c *fiber.Ctx) error {
	if d.cfg.Consoles == nil {
		return d.fail(c, fiber.NewError(http.StatusNotImplemented, "this dashboard serves no console logs"))
	}
	name := c.Params("name")
	from, err := resumePoint(c.Query("from"), c.Get("Last-Event-ID"))
	if err != nil {
		return d.fail(c, err)
	}
	path, err := d.cfg.Consoles.ConsoleLog(c.UserContext(), name)
	if err != nil {
		return d.fail(c, err)
	}
	c.Set("Content-Type", "text/event-stream")
	c.Set("Cache-Control", "no-store")
	c.Set("X-Accel-Buffering", "no")
	sid, _ := c.Locals(localSession).(string)
	conn, writeTimeout := c.Context().Conn(), c.App().Config().WriteTimeout
	d.streams.Add(1)
	c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
		defer d.streams.Add(-1)
		// Each flush extends the write deadline (see stream).
		w = listener.StreamWriter(w, conn, writeTimeout)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-d.done:
				cancel()
			case <-ctx.Done():
			}
		}()
		fmt.Fprintf(w, "retry: 1000\n\n")
		if w.Flush() != nil {
			return
		}
		for path == "" {
			// The guest was never started: wait for its first start.
			if !d.consoleWait(ctx, w, sid) {
				return
			}
			if path, err = d.cfg.Consoles.ConsoleLog(ctx, name); err != nil {
				return
			}
		}
		var p ansi.Parser
		last, checked := time.Now(), time.Now()
		// The session is checked once per heartbeat period, whether the
		// guest prints or not: a revoked session stops receiving.
		check := func() error {
			if time.Since(checked) < d.cfg.Heartbeat {
				return nil
			}
			checked = time.Now()
			if !d.sessionLive(sid) {
				return errSessionEnded
			}
			return nil
		}
		err := console.Follow(ctx, path, from, console.FollowOptions{Poll: ConsolePoll, MaxLag: ConsoleMaxLag,
			Idle: func() error {
				if err := check(); err != nil {
					return err
				}
				if time.Since(last) < d.cfg.Heartbeat {
					return nil
				}
				last = time.Now()
				w.WriteString(": heartbeat\n\n")
				return w.Flush()
			}},
			func(ch console.Chunk) error {
				if err := check(); err != nil {
					return err
				}
				if ch.Skipped > 0 || ch.Offset == 0 {
					p = ansi.Parser{} // a sequence cut by the skip, or a new log
				}
				msg, _ := json.Marshal(consoleMessage{Offset: ch.End(), Skipped: ch.Skipped, Reset: ch.Offset == 0 && from > 0, Segments: p.Feed(ch.Data)})
				from = ch.End()
				writeMessage(w, "console", ch.End(), msg)
				last = time.Now()
				return w.Flush()
			})
		if err != nil && !errors.Is(err, errSessionEnded) {
			d.log.Debug("console stream ended", "instance", name, "err", err)
		}
	})
	return nil
}

var errSessionEnded = errors.New("session ended")

// consoleWait sends a heartbeat after one period and reports whether the
// stream should go on.
func (d *Dashboard) consoleWait(ctx context.Context, w *bufio.Writer, sid string) bool {
	t := time.NewTimer(min(d.cfg.Heartbeat, time.Second))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	if !d.sessionLive(sid) {
		return false
	}
	w.WriteString(": waiting for the guest's first start\n\n")
	return w.Flush() == nil
}
