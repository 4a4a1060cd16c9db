package events

import (
	"context"
	"log/slog"
	"time"
)

// WithLocation names the daemon in the location field of the events it
// publishes (a cluster member's name; LXD's event envelope field).
func WithLocation(name string) Option {
	return func(b *Bus) { b.location = name }
}

// tailBatch is how many stored events the tail reads at once.
const tailBatch = 512

// tail delivers the event log to the subscribers in id order, whoever
// wrote the events: used when several daemons (cluster members) append to
// one log. Event-appending transactions are serialised by the database
// (db/writer.go), so the committed ids always form a prefix of the ids
// handed out (holes left by rolled-back appends never fill): reading the
// rows after the last delivered id misses nothing and repeats nothing.
type tail struct {
	bus   *Bus
	last  int64
	wake  chan struct{}
	quit  chan struct{}
	done  chan struct{}
	log   *slog.Logger
	retry time.Duration
}

// StartTail switches the bus to delivery from the store: every event with
// an id above the log's current last id is delivered in id order, local
// or written by another daemon sharing the log. Call Poke when another
// daemon committed events (a PostgreSQL notification); the bus pokes
// itself after its own appends. Call it before any subscriber exists.
func (b *Bus) StartTail(ctx context.Context) error {
	last, err := b.store.LastEventID(ctx)
	if err != nil {
		return err
	}
	t := &tail{bus: b, last: last, wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{}),
		log: b.log, retry: 200 * time.Millisecond}
	b.mu.Lock()
	b.tail = t
	b.mu.Unlock()
	go t.run()
	return nil
}

// Poke tells the tail that new events may be in the store.
func (b *Bus) Poke() {
	b.mu.Lock()
	t := b.tail
	b.mu.Unlock()
	if t != nil {
		t.poke()
	}
}

func (t *tail) poke() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

func (t *tail) stop() {
	close(t.quit)
	<-t.done
}

func (t *tail) run() {
	defer close(t.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-t.quit
		cancel()
	}()
	for {
		select {
		case <-t.quit:
			return
		case <-t.wake:
		}
		for {
			recs, err := t.bus.store.EventsAfter(ctx, t.last, tailBatch)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				t.log.Warn("reading the event log", "after", t.last, "err", err)
				select {
				case <-t.quit:
					return
				case <-time.After(t.retry):
				}
				continue
			}
			evs := make([]Event, 0, len(recs))
			for _, rec := range recs {
				ev, err := decodeStored(rec)
				if err != nil {
					t.log.Error("skipping an undecodable stored event", "id", rec.ID, "err", err)
					continue
				}
				evs = append(evs, ev)
			}
			t.bus.mu.Lock()
			for _, ev := range evs {
				for s := range t.bus.subs {
					s.deliverLocked(ev)
				}
			}
			t.bus.mu.Unlock()
			if len(recs) > 0 {
				t.last = recs[len(recs)-1].ID
			}
			if len(recs) < tailBatch {
				break
			}
		}
	}
}
