package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/guestlink/guestlink/errdefs"
)

// Record is one entry of the persisted event log; ID is monotonic and is
// the resume point for event subscribers.
type Record struct {
	ID       int64
	Time     time.Time
	Type     string
	Instance string // the instance the event is about ("" for none)
	Body     []byte // the event's JSON as sent to subscribers, minus its id
}

// EventStore is the persisted event log the bus uses; the daemon's store
// (db) implements it. AppendEvent must give ids in commit order (db's
// group-commit writer does). Errors wrap the errdefs kinds: ErrInvalid for
// a record the log cannot take, ErrClosed once the store was closed.
type EventStore interface {
	AppendEvent(ctx context.Context, ev *Record) error // sets ev.ID
	// EventsAfter returns up to limit events with ID > after, oldest first.
	EventsAfter(ctx context.Context, after int64, limit int) ([]*Record, error)
	LastEventID(ctx context.Context) (int64, error)
}

// Errors a Subscription reports through Err once its channel is closed.
var (
	// ErrOverflow means the subscriber did not keep up: its buffer filled
	// and the bus dropped it rather than block publishers. The subscriber
	// resubscribes with Filter.After set to the last id it received and
	// misses nothing.
	ErrOverflow = errors.New("event subscriber fell behind")
	// ErrClosed means the bus was closed.
	ErrClosed = errors.New("event bus closed")
)

// Defaults of the bus options.
const (
	DefaultBuffer  = 1024
	DefaultBacklog = 65536
	replayPage     = 512
)

// Option configures a Bus.
type Option func(*Bus)

// WithBuffer sets how many events a live subscription may have waiting
// before it overflows (default DefaultBuffer).
func WithBuffer(n int) Option {
	return func(b *Bus) {
		if n > 0 {
			b.buffer = n
		}
	}
}

// WithBacklog sets how many live events a resuming subscription may hold
// while it still replays the stored log before it overflows (default
// DefaultBacklog).
func WithBacklog(n int) Option {
	return func(b *Bus) {
		if n > 0 {
			b.backlog = n
		}
	}
}

// WithLogger sets the logger for events the bus cannot decode on replay.
func WithLogger(l *slog.Logger) Option {
	return func(b *Bus) {
		if l != nil {
			b.log = l
		}
	}
}

// Bus is the daemon's event bus. Publish persists every event (which gives
// it its monotonic id) and then delivers it to every matching subscriber, in
// id order, without ever waiting for a subscriber. A Bus is safe for
// concurrent use.
type Bus struct {
	store   EventStore
	buffer  int
	backlog int
	log     *slog.Logger
	retry   WriteRetry // of appends to the event log

	mu     sync.Mutex
	closed bool
	subs   map[*Subscription]struct{}
	// overflows counts the subscriptions ended with ErrOverflow (Stats).
	overflows uint64

	// The sequencer: concurrent appends may return in any order, but
	// subscribers must see ids in increasing order (a client resumes from
	// the last id it saw). Each append takes a ticket; an appended event is
	// delivered once every append in flight when it returned has returned,
	// since only those can hold a smaller id (ids follow commit order).
	nextTicket uint64
	lowTicket  uint64 // lowest ticket whose append has not returned
	returned   map[uint64]struct{}
	pending    []pendingEvent // sorted by id

	// location names this daemon in its events (a cluster member).
	location string
	// tail, when set (several daemons share the event log), delivers
	// every event, local or another member's, from the store in id order.
	tail *tail
}

type pendingEvent struct {
	ev        Event
	watermark uint64 // deliverable once lowTicket > watermark
}

// New returns a bus that persists events in store.
func New(store EventStore, opts ...Option) *Bus {
	b := &Bus{
		store:    store,
		buffer:   DefaultBuffer,
		backlog:  DefaultBacklog,
		log:      slog.New(slog.DiscardHandler),
		retry:    DefaultWriteRetry,
		subs:     make(map[*Subscription]struct{}),
		returned: make(map[uint64]struct{}),
	}
	for _, o := range opts {
		o(b)
	}
	return b
}

// wireBody is an event as stored in Record.Body: the JSON subscribers
// receive, minus its id.
type wireBody struct {
	Type      string          `json:"type"`
	Timestamp time.Time       `json:"timestamp"`
	Project   string          `json:"project"`
	Location  string          `json:"location"`
	Metadata  json.RawMessage `json:"metadata"`
}

// Publish persists ev, which assigns its id, and delivers it to the
// subscribers whose filter matches. It returns ev with its id once the event
// is durable; subscribers may receive it just before or just after. A zero
// Timestamp is set to now (UTC); Type is required. Publish never waits for
// subscribers.
func (b *Bus) Publish(ctx context.Context, ev Event) (Event, error) {
	rec, err := b.record(&ev)
	if err != nil {
		return ev, err
	}

	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ev, fmt.Errorf("publishing %s event: %w", ev.Type, ErrClosed)
	}
	ticket := b.nextTicket
	b.nextTicket++
	b.mu.Unlock()

	err = b.appendEvent(ctx, rec)

	b.mu.Lock()
	b.returned[ticket] = struct{}{}
	for {
		if _, ok := b.returned[b.lowTicket]; !ok {
			break
		}
		delete(b.returned, b.lowTicket)
		b.lowTicket++
	}
	if err == nil {
		ev.ID = rec.ID
		p := pendingEvent{ev: ev, watermark: b.nextTicket - 1}
		i, _ := slices.BinarySearchFunc(b.pending, ev.ID, func(p pendingEvent, id int64) int {
			return cmpInt64(p.ev.ID, id)
		})
		b.pending = slices.Insert(b.pending, i, p)
	}
	b.flushLocked()
	b.mu.Unlock()
	if err != nil {
		return ev, fmt.Errorf("publishing %s event: %w", ev.Type, err)
	}
	return ev, nil
}

// record completes ev (timestamp, location, metadata) and returns the row
// that persists it.
func (b *Bus) record(ev *Event) (*Record, error) {
	if ev.Type == "" {
		return nil, fmt.Errorf("publishing event: empty type: %w", errdefs.ErrInvalid)
	}
	if ev.Timestamp.IsZero() {
		ev.Timestamp = time.Now().UTC()
	}
	if b.location != "" && (ev.Location == "" || ev.Location == DefaultLocation) {
		ev.Location = b.location // a cluster member names itself
	}
	if len(ev.Metadata) == 0 {
		ev.Metadata = json.RawMessage("{}")
	}
	body, err := json.Marshal(wireBody{Type: ev.Type, Timestamp: ev.Timestamp, Project: ev.Project, Location: ev.Location, Metadata: ev.Metadata})
	if err != nil {
		return nil, fmt.Errorf("publishing %s event: encoding: %w", ev.Type, errors.Join(errdefs.ErrInvalid, err))
	}
	return &Record{Time: ev.Timestamp, Type: ev.Type, Instance: ev.Instance, Body: body}, nil
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// flushLocked delivers the pending events that can no longer be overtaken.
func (b *Bus) flushLocked() {
	if b.tail != nil {
		// The tail delivers from the store, in the order of every member.
		b.pending = b.pending[:0]
		b.tail.poke()
		return
	}
	n := 0
	for n < len(b.pending) && b.lowTicket > b.pending[n].watermark {
		ev := b.pending[n].ev
		for s := range b.subs {
			s.deliverLocked(ev)
		}
		n++
	}
	if n > 0 {
		b.pending = slices.Delete(b.pending, 0, n)
	}
}

// Close closes every subscription (their Err is ErrClosed) and makes further
// Publish and Subscribe calls fail. It waits for replaying subscriptions to
// stop.
func (b *Bus) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	t := b.tail
	b.mu.Unlock()
	if t != nil {
		t.stop() // outside b.mu: the tail takes it to deliver
	}
	b.mu.Lock()
	subs := make([]*Subscription, 0, len(b.subs))
	for s := range b.subs {
		subs = append(subs, s)
		s.failLocked(ErrClosed)
	}
	b.mu.Unlock()
	for _, s := range subs {
		<-s.done
	}
	return nil
}

// Filter selects the events a subscription receives.
type Filter struct {
	Types     []string // event types; empty means all
	Instances []string // instance names; empty means all
	// After resumes a stream: every stored event with an id greater than
	// After is delivered first, then live ones, with no gap and no
	// duplicate. 0 means from now on, unless Replay is set.
	After int64
	// Replay replays the stored events after After even when After is 0,
	// so a subscriber can ask for the whole stored log from event 1.
	Replay bool
	// Buffer is how many live events this subscription may have waiting
	// before it overflows; 0 means the bus's (WithBuffer). A subscriber
	// that fans out to many others (the dashboard's hub) needs more than
	// one that serves a single client.
	Buffer int
}

// Match reports whether ev passes the filter's type and instance lists.
func (f *Filter) Match(ev *Event) bool {
	if len(f.Types) > 0 && !slices.Contains(f.Types, ev.Type) {
		return false
	}
	if len(f.Instances) > 0 && !slices.Contains(f.Instances, ev.Instance) {
		return false
	}
	return true
}

// Subscription modes.
const (
	modeReplay = iota // reading the stored log; live events go to backlog
	modeLive          // live events go straight to ch
)

// Subscription is one subscriber's stream of events. Read C until it is
// closed, then look at Err.
type Subscription struct {
	bus    *Bus
	filter Filter
	ch     chan Event
	ctx    context.Context // ends when the subscription closes
	cancel context.CancelFunc
	done   chan struct{} // closed once no goroutine of the bus sends on ch

	// guarded by bus.mu
	mode    int
	backlog []Event
	// replayed is the last id the replay sent: live events up to it were
	// still in the sequencer when the replay read them from the store.
	replayed int64
	closed   bool
	err      error
}

// Subscribe starts a subscription. With f.After > 0 (or f.Replay) the stored
// events after that id are replayed first; a negative After is
// errdefs.ErrInvalid.
func (b *Bus) Subscribe(f Filter) (*Subscription, error) {
	if f.After < 0 {
		return nil, fmt.Errorf("subscribing to events: negative resume id %d: %w", f.After, errdefs.ErrInvalid)
	}
	if f.Buffer < 0 {
		return nil, fmt.Errorf("subscribing to events: negative buffer %d: %w", f.Buffer, errdefs.ErrInvalid)
	}
	buffer := b.buffer
	if f.Buffer > 0 {
		buffer = f.Buffer
	}
	f.Types = slices.Clone(f.Types)
	f.Instances = slices.Clone(f.Instances)
	ctx, cancel := context.WithCancel(context.Background())
	s := &Subscription{
		bus:    b,
		filter: f,
		ch:     make(chan Event, buffer),
		ctx:    ctx,
		cancel: cancel,
		done:   make(chan struct{}),
		mode:   modeLive,
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		cancel()
		return nil, fmt.Errorf("subscribing to events: %w", ErrClosed)
	}
	b.subs[s] = struct{}{}
	if f.After == 0 && !f.Replay {
		close(s.done)
		return s, nil
	}
	s.mode = modeReplay
	go s.replay()
	return s, nil
}

// C returns the channel events arrive on, in increasing id order. It is
// closed when the subscription ends (Close, overflow, bus closed).
func (s *Subscription) C() <-chan Event { return s.ch }

// Err returns why the subscription ended: nil after Close, ErrOverflow when
// the subscriber fell behind, ErrClosed when the bus closed, or a store
// error from replaying. It is nil while the subscription runs.
func (s *Subscription) Err() error {
	s.bus.mu.Lock()
	defer s.bus.mu.Unlock()
	return s.err
}

// Close ends the subscription; C is closed. It is safe to call more than
// once and from any goroutine.
func (s *Subscription) Close() error {
	s.bus.mu.Lock()
	s.failLocked(nil)
	s.bus.mu.Unlock()
	<-s.done
	return nil
}

// failLocked ends the subscription with err (nil for a plain Close).
func (s *Subscription) failLocked(err error) {
	if s.closed {
		return
	}
	s.closed = true
	s.err = err
	if errors.Is(err, ErrOverflow) {
		s.bus.overflows++
	}
	s.backlog = nil
	delete(s.bus.subs, s)
	s.cancel()
	if s.mode == modeLive {
		close(s.ch)
	}
	// In replay mode the replay goroutine closes ch as it exits.
}

// deliverLocked hands ev to the subscription without blocking.
func (s *Subscription) deliverLocked(ev Event) {
	if s.closed || ev.ID <= s.replayed || !s.filter.Match(&ev) {
		return
	}
	if s.mode == modeLive {
		select {
		case s.ch <- ev:
		default:
			s.failLocked(ErrOverflow)
		}
		return
	}
	if len(s.backlog) >= s.bus.backlog {
		s.failLocked(ErrOverflow)
		return
	}
	s.backlog = append(s.backlog, ev)
}

// replay sends the stored events after filter.After, then the live events
// that arrived meanwhile, and switches the subscription to live delivery.
func (s *Subscription) replay() {
	defer close(s.done)
	cursor := s.filter.After
	send := func(ev Event) bool {
		select {
		case s.ch <- ev:
			return true
		case <-s.ctx.Done():
			return false
		}
	}
	for {
		recs, err := s.bus.store.EventsAfter(s.ctx, cursor, replayPage)
		if err != nil {
			s.bus.mu.Lock()
			s.failLocked(fmt.Errorf("replaying events after id %d: %w", cursor, err))
			s.bus.mu.Unlock()
			close(s.ch)
			return
		}
		for _, rec := range recs {
			if rec.ID <= cursor {
				continue
			}
			cursor = rec.ID
			ev, err := decodeStored(rec)
			if err != nil {
				s.bus.log.Warn("skipping undecodable stored event", "id", rec.ID, "err", err)
				continue
			}
			if s.filter.Match(&ev) && !send(ev) {
				close(s.ch)
				return
			}
		}
		if len(recs) < replayPage {
			break
		}
	}
	for {
		s.bus.mu.Lock()
		if s.closed {
			s.bus.mu.Unlock()
			close(s.ch)
			return
		}
		if len(s.backlog) == 0 {
			s.replayed = cursor
			s.mode = modeLive
			s.bus.mu.Unlock()
			return
		}
		backlog := s.backlog
		s.backlog = nil
		s.bus.mu.Unlock()
		for _, ev := range backlog {
			if ev.ID <= cursor {
				continue // already replayed from the store
			}
			cursor = ev.ID
			if !send(ev) {
				close(s.ch)
				return
			}
		}
	}
}

// decodeStored rebuilds an event from its stored form.
func decodeStored(rec *Record) (Event, error) {
	var w wireBody
	if err := json.Unmarshal(rec.Body, &w); err != nil {
		return Event{}, fmt.Errorf("decoding stored event %d: %w", rec.ID, err)
	}
	if w.Type == "" {
		w.Type = rec.Type
	}
	if w.Timestamp.IsZero() {
		w.Timestamp = rec.Time
	}
	return Event{
		ID:        rec.ID,
		Type:      w.Type,
		Timestamp: w.Timestamp,
		Project:   w.Project,
		Location:  w.Location,
		Instance:  rec.Instance,
		Metadata:  w.Metadata,
	}, nil
}

// LastID returns the id of the newest stored event (0 if none): a client
// that wants "from now on" but must not miss what follows subscribes with
// After set to it.
func (b *Bus) LastID(ctx context.Context) (int64, error) {
	id, err := b.store.LastEventID(ctx)
	if err != nil {
		return 0, fmt.Errorf("reading last event id: %w", err)
	}
	return id, nil
}
