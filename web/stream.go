package web

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a-h/templ"
	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/listener"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/web/components"
)

// stream serves the live event stream as server-sent events. Each lifecycle
// event the page shows something of becomes one "update" message whose
// data is HTML fragments marked for out-of-band swaps (what the page's
// view= shows of it: the instance's table row, its page badges, a timeline
// entry, an activity line; scope.go), so open pages are patched in place
// without refetching anything. Every message carries the event id; a
// client resumes with ?since=<id> or the Last-Event-ID header and misses
// nothing its page shows. A heartbeat message every period keeps proxies
// from closing the stream and lets the page notice a dead one; it carries
// an id when the stream passed over events since its last update.
func (d *Dashboard) stream(c *fiber.Ctx) error {
	since, err := resumePoint(c.Query("since"), c.Get("Last-Event-ID"))
	if err != nil {
		return d.fail(c, err)
	}
	scope, err := d.parseScope(c)
	if err != nil {
		return d.fail(c, err)
	}
	f, upTo, err := d.hub.join(scope)
	if err != nil {
		return d.fail(c, err)
	}
	var replay *events.Subscription
	if since > 0 && since < upTo {
		// The events between since and upTo are in the log only. All
		// types: upTo may be the id of an event of another type.
		if replay, err = d.cfg.Events.Subscribe(events.Filter{After: since}); err != nil {
			d.hub.leave(f)
			return d.fail(c, err)
		}
	}
	c.Set("Content-Type", "text/event-stream")
	c.Set("Cache-Control", "no-store")
	c.Set("Connection", "keep-alive")
	c.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	heartbeat := d.cfg.Heartbeat
	sid, _ := c.Locals(localSession).(string)
	conn, writeTimeout := c.Context().Conn(), c.App().Config().WriteTimeout
	d.streams.Add(1)
	// The stream is written on the connection's own goroutine in batches
	// (streamBody), not through fasthttp's pipe (SetBodyStreamWriter),
	// which forwards a stream 4 KiB at a time, each its own write.
	c.Context().SetBodyStream(&streamBody{abandon: func() {
		// Never written (HEAD, or the answer failed before its body).
		if replay != nil {
			replay.Close()
		}
		d.hub.leave(f)
		d.streams.Add(-1)
	}, write: func(w *bufio.Writer) {
		defer d.streams.Add(-1)
		defer d.hub.leave(f)
		// Each flush extends the write deadline: the stream lasts as long
		// as the page reads it.
		w = listener.StreamWriter(w, conn, writeTimeout)
		var lastID int64 // the newest event this stream sent or passed over
		var told int64   // the newest id the client was given
		var lastFlush time.Time
		send := func(ev events.Event) {
			writeMessage(w, "update", ev.ID, d.frags.get(ev, scope.kind))
			lastID, told = ev.ID, ev.ID
		}
		sendNew := func(ev events.Event) {
			if ev.ID > lastID { // else sent by the replay already
				send(ev)
			}
		}
		// Tell the browser how long to wait before its own reconnect.
		fmt.Fprintf(w, "retry: 1000\n\n")
		if w.Flush() != nil {
			return
		}
		if replay != nil {
			ok := d.replay(w, replay, upTo, scope, send)
			replay.Close()
			if !ok {
				return
			}
			lastID = max(lastID, upTo) // the replay read the log up to upTo
		}
		tick := time.NewTicker(heartbeat)
		defer tick.Stop()
		countsDue := time.NewTimer(time.Second)
		countsPending := told > 0 && scope.counts() // the replay sent events: counts follow
		if !countsPending {
			countsDue.Stop()
		}
		for {
			select {
			case ev, ok := <-f.ch:
				if !ok {
					// Fell behind, or shutdown: end the stream; the client
					// reconnects and resumes from its last id.
					return
				}
				sendNew(ev)
				// Whatever else is queued goes out with it, in one flush: a
				// storm of events costs a write per batch, not per event,
				// and the stream keeps up instead of being dropped. Within
				// streamFlushEvery of the last flush (a storm), what
				// arrives until the next is due joins the batch: each
				// stream's write is then paid per period, not per event.
				if !drainFeed(f.ch, sendNew) || !lingerFeed(f.ch, sendNew, streamFlushEvery-time.Since(lastFlush), d.done) {
					_ = w.Flush()
					return // fell behind, or shutdown (see above)
				}
				if !countsPending && scope.counts() {
					countsPending = true
					countsDue.Reset(time.Second)
				}
			case <-countsDue.C:
				countsPending = false
				writeMessage(w, "counts", 0, d.counts.fragment(lastID))
			case now := <-tick.C:
				if !d.sessionLive(sid) {
					// Signed out or expired: the stream ends, and the
					// page's reconnect meets the login.
					return
				}
				// Events passed over since the last update: the heartbeat
				// moves the page's resume point past them, once nothing
				// older is queued (skipped is read first: see feed).
				if skipped := f.skipped.Load(); skipped > lastID && len(f.ch) == 0 {
					lastID = skipped
				}
				var at int64
				if lastID > told {
					at, told = lastID, lastID
				}
				writeMessage(w, "heartbeat", at, []byte(now.UTC().Format(time.RFC3339)))
			case <-d.done:
				return
			}
			if w.Flush() != nil {
				return // the client went away
			}
			lastFlush = time.Now()
		}
	}}, -1)
	return nil
}

// sessionLive reports whether the session a stream was opened with is still
// valid (always, without Sessions). A stream checks at each heartbeat, so a
// revoked or expired session stops receiving within one period. A failure
// of the service itself keeps the stream: it was valid, and the next
// heartbeat asks again.
func (d *Dashboard) sessionLive(sid string) bool {
	if d.cfg.Sessions == nil {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := d.cfg.Sessions.Validate(ctx, sid)
	if err != nil && !errors.Is(err, errdefs.ErrUnauthorized) {
		d.log.Warn("dashboard: checking a live stream's session", "err", err)
		return true
	}
	return err == nil
}

// replay sends the stored lifecycle events of sub up to and including id
// upTo that scope wants; it reports false when the stream must end (client
// gone, shutdown, subscription ended early).
func (d *Dashboard) replay(w *bufio.Writer, sub *events.Subscription, upTo int64, scope *streamScope, send func(events.Event)) bool {
	for {
		select {
		case ev, ok := <-sub.C():
			if !ok {
				return false
			}
			if ev.Type == events.TypeLifecycle && scope.wants(eventHead(ev)) {
				send(ev)
				if w.Flush() != nil {
					return false
				}
			}
			if ev.ID >= upTo {
				return true
			}
		case <-d.done:
			return false
		}
	}
}

// resumePoint returns the id to resume after: the larger of the query's
// since and the Last-Event-ID header.
func resumePoint(query, header string) (int64, error) {
	var since int64
	for _, v := range []string{query, header} {
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("invalid resume id %q: want a non-negative integer: %w", v, errdefs.ErrInvalid)
		}
		since = max(since, n)
	}
	return since, nil
}

// writeMessage writes one server-sent event; multi-line data is split into
// data: lines as the format requires.
func writeMessage(w *bufio.Writer, name string, id int64, data []byte) {
	w.WriteString("event: " + name + "\n")
	if id > 0 {
		w.WriteString("id: " + strconv.FormatInt(id, 10) + "\n")
	}
	for _, line := range bytes.Split(data, []byte("\n")) {
		w.WriteString("data: ")
		w.Write(line)
		w.WriteByte('\n')
	}
	w.WriteByte('\n')
}

// fragmentCache renders each event's fragments once per kind of page,
// however many pages are open: the first stream to need an event's
// fragments for its kind renders them while the others wait for that
// rendering, and the most recent renderings are kept.
type fragmentCache struct {
	d    *Dashboard
	size int
	mu   sync.Mutex
	byID map[fragmentKey]*rendering
	ids  []fragmentKey
}

// fragmentKey names one rendering: an event's fragments for a kind of page.
type fragmentKey struct {
	id   int64
	kind scopeKind
}

// rendering is one event's fragments; ready is closed once b is set.
type rendering struct {
	ready chan struct{}
	b     []byte
}

func newFragmentCache(d *Dashboard, size int) *fragmentCache {
	return &fragmentCache{d: d, size: size, byID: make(map[fragmentKey]*rendering)}
}

func (fc *fragmentCache) get(ev events.Event, kind scopeKind) []byte {
	key := fragmentKey{ev.ID, kind}
	fc.mu.Lock()
	if r, ok := fc.byID[key]; ok {
		fc.mu.Unlock()
		<-r.ready
		return r.b
	}
	r := &rendering{ready: make(chan struct{})}
	fc.byID[key] = r
	fc.ids = append(fc.ids, key)
	if len(fc.ids) > fc.size {
		delete(fc.byID, fc.ids[0])
		fc.ids = fc.ids[1:]
	}
	fc.mu.Unlock()
	func() {
		defer close(r.ready) // never leave the other streams waiting
		r.b = fc.d.renderEvent(ev, kind)
	}()
	return r.b
}

// renderEvent renders the out-of-band fragments a kind of page shows of one
// lifecycle event: a list page its table row (appended when created,
// removed when deleted), an instance page its badges and timeline entry,
// the overview its activity line, a stream without view= all of them.
func (d *Dashboard) renderEvent(ev events.Event, kind scopeKind) []byte {
	lc, _ := events.DecodeLifecycle(ev.Metadata) // a malformed event still gets an activity line
	name := ev.Instance
	if name == "" {
		name = strings.TrimPrefix(lc.Source, "/1.0/instances/")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var buf bytes.Buffer
	m := components.Meta{Now: time.Now()}
	// Table rows and list items cannot stand alone in HTML: each fragment is
	// wrapped in a <template>, which htmx unwraps for out-of-band swaps.
	wrap := func(c templ.Component) {
		buf.WriteString("<template>")
		_ = c.Render(ctx, &buf)
		buf.WriteString("</template>")
	}
	rows := kind == scopeAll || kind == scopeInstances
	page := kind == scopeAll || kind == scopeInstance
	if rows || page {
		inst, err := d.cfg.Instances.Get(ctx, name)
		var w api.Instance
		if err == nil {
			w = instance.WireInstance(inst, nil)
			d.withGuest(&w)
		}
		switch {
		case lc.Action == events.InstanceDeleted:
			if rows {
				wrap(components.RowRemoved(name))
			}
		case err != nil:
			// Gone already (deleted since); nothing to patch.
		case lc.Action == events.InstanceCreated:
			if rows {
				wrap(components.RowAdded(&w, m))
			}
		default:
			if rows {
				wrap(components.InstanceRow(&w, m, true))
			}
			if page {
				_ = components.InstanceBadges(&w, m, true).Render(ctx, &buf)
			}
		}
	}
	if item, ok := timelineItem(ev, lc); ok && name != "" && page {
		wrap(components.TimelinePrepend(name, item))
	}
	if kind == scopeAll || kind == scopeOverview {
		wrap(components.ActivityPrepend(activity(ev, lc, name)))
	}
	return buf.Bytes()
}

// timelineItem maps a lifecycle event to the timeline entry the instance
// page shows for it (an exec or file operation's as its timeline record
// has it).
func timelineItem(ev events.Event, lc events.Lifecycle) (components.TimelineItem, bool) {
	item := components.TimelineItem{Time: ev.Timestamp}
	if e, ok := instance.AccessTimeline(lc.Action, lc.Context, lc.Requestor); ok {
		// An exec or file operation: the entry its record holds.
		item.Boot, item.Kind, item.To, item.Cause, item.Detail = e.Boot, e.Kind, e.To, e.Cause, e.Detail
		return item, true
	}
	if lc.Requestor != nil {
		item.Cause = lc.Requestor.Protocol
	}
	switch {
	case strings.HasPrefix(lc.Action, "instance-agent-"):
		item.Kind, item.To = "agent", strings.TrimPrefix(lc.Action, "instance-agent-")
	case lc.Action == events.InstanceReady:
		item.Kind, item.To = "ready", "true"
	case lc.Action == events.InstanceUnready:
		item.Kind, item.To = "ready", "false"
	case lc.Action == events.InstanceStarted, lc.Action == events.InstanceStopped, lc.Action == events.InstanceRestarted, lc.Action == events.InstanceError:
		item.Kind, item.To = "state", strings.TrimPrefix(lc.Action, "instance-")
	default:
		return item, false
	}
	if b, ok := lc.Context["boot"].(float64); ok {
		item.Boot = int64(b)
	}
	return item, true
}

func activity(ev events.Event, lc events.Lifecycle, name string) components.Activity {
	a := components.Activity{ID: ev.ID, Time: ev.Timestamp, Instance: name, Action: strings.TrimPrefix(lc.Action, "instance-")}
	if r := lc.Requestor; r != nil {
		a.Who = r.Protocol
		if r.Username != "" {
			a.Who += " " + r.Username // "dashboard session/abcd1234"
		}
	}
	return a
}

// recentActivity returns the last n lifecycle events, newest first.
func (d *Dashboard) recentActivity(ctx context.Context, n int) []components.Activity {
	evs, err := d.cfg.Events.Recent(ctx, events.TypeLifecycle, n)
	if err != nil {
		d.log.Warn("dashboard: reading recent events", "err", err)
		return nil
	}
	out := make([]components.Activity, 0, len(evs))
	for _, ev := range evs {
		lc, _ := events.DecodeLifecycle(ev.Metadata)
		out = append(out, activity(ev, lc, ev.Instance))
	}
	return newestFirst(out, n)
}

func newestFirst(list []components.Activity, n int) []components.Activity {
	if len(list) > n {
		list = list[len(list)-n:]
	}
	out := make([]components.Activity, len(list))
	for i, a := range list {
		out[len(list)-1-i] = a
	}
	return out
}

func (d *Dashboard) lastEventID() int64 {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	id, err := d.cfg.Events.LastID(ctx)
	if err != nil {
		return 0
	}
	return id
}

// countCache keeps the overview's counts as of an event id, so that many
// open pages cost one listing per burst of events, not one per page.
type countCache struct {
	d   *Dashboard
	mu  sync.Mutex
	id  int64 // the last event id the counts reflect
	buf []byte
}

// fragment returns the count tiles as of event id upTo (or later).
func (cc *countCache) fragment(upTo int64) []byte {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.buf != nil && cc.id >= upTo {
		return cc.buf
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	all, err := cc.d.listRows(ctx, instance.ListFilter{})
	if err != nil {
		cc.d.log.Warn("dashboard: listing instances for the counts", "err", err)
		return cc.buf
	}
	byStatus, byAgent := tally(all)
	var buf bytes.Buffer
	_ = components.Counts("status-counts", byStatus, true).Render(ctx, &buf)
	_ = components.Counts("agent-counts", byAgent, true).Render(ctx, &buf)
	cc.buf, cc.id = buf.Bytes(), upTo
	return cc.buf
}

// streamFlushEvery is the shortest time between two flushes of a live stream
// carrying events: an event that comes later than that after the previous
// flush goes out at once, one that comes sooner waits at most this long with
// those that follow it. A stream wrote each event of a storm on its own (50
// live streams: 50 writes per Ready declaration, 17 % of the daemon's CPU
// in a storm's profile, docs/performance.md); now at most 20 writes per
// stream and second. It adds at most this much to an event's delivery.
const streamFlushEvery = 50 * time.Millisecond

// streamBufferSize is a live stream's write buffer: a storm's batch of
// updates (about 3.7 KB each: 8 of them) goes out in one write.
const streamBufferSize = 32 << 10

// streamBody is a live stream's response body. fasthttp consumes it with
// WriteTo on the connection's goroutine: each flush of the stream's writer
// is one chunk and one write on the connection. Read (any other consumer)
// runs the stream through a pipe.
type streamBody struct {
	// write runs the stream; abandon undoes its set-up when the body is
	// closed unwritten.
	write   func(w *bufio.Writer)
	abandon func()

	started atomic.Bool
	once    sync.Once
	pr      *io.PipeReader
}

// WriteTo runs the stream into dst until it ends.
func (b *streamBody) WriteTo(dst io.Writer) (int64, error) {
	if !b.started.CompareAndSwap(false, true) {
		return 0, errors.New("live stream: written twice")
	}
	cw := &countingWriter{w: dst}
	w := bufio.NewWriterSize(cw, streamBufferSize)
	b.write(w)
	err := w.Flush()
	if err == nil {
		err = cw.err
	}
	return cw.n, err
}

// SupportsBodyWriteTo reports that WriteTo may replace Read (fasthttp's
// BodyWriterTo): they produce the same stream.
func (b *streamBody) SupportsBodyWriteTo() bool { return true }

// Read runs the stream through a pipe on first use.
func (b *streamBody) Read(p []byte) (int, error) {
	b.once.Do(func() {
		pr, pw := io.Pipe()
		b.pr = pr
		go func() {
			_, err := b.WriteTo(pw)
			pw.CloseWithError(err)
		}()
	})
	return b.pr.Read(p)
}

// Close ends a stream read through Read; one written with WriteTo has ended
// already, and one never written is abandoned (HEAD answers close their body
// unread).
func (b *streamBody) Close() error {
	b.once.Do(func() {})
	if b.pr != nil {
		return b.pr.Close()
	}
	if b.started.CompareAndSwap(false, true) {
		b.abandon()
	}
	return nil
}

// countingWriter counts what is written to w and keeps its first error.
type countingWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.err = err
	return n, err
}

// lingerFeed hands send the events arriving on ch for d (nothing when d <=
// 0), until done is closed; it reports false when ch was closed or done.
func lingerFeed(ch <-chan events.Event, send func(events.Event), d time.Duration, done <-chan struct{}) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return false
			}
			send(ev)
		case <-t.C:
			return true
		case <-done:
			return false
		}
	}
}

// drainFeed hands send every event queued on ch without waiting, at most a
// feed's worth (cap(ch)); it reports false when ch was closed.
func drainFeed(ch <-chan events.Event, send func(events.Event)) bool {
	for range cap(ch) {
		select {
		case ev, ok := <-ch:
			if !ok {
				return false
			}
			send(ev)
		default:
			return true
		}
	}
	return true
}
