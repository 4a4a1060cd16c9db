package fleetbackend

import (
	"context"
	"time"

	"github.com/guestlink/guestlink/link/ringproto"
	"github.com/guestlink/guestlink/plugins/sdk"
)

// pushEvents opens an Events stream whose ring-data events carry the
// guest's ring bytes (sdk.CapRingPush): the ring is drained as the event
// leaves the stream's queue, so a hint that coalesced others carries all
// their bytes, and every drain takes the next sequence number of the guest
// (ringSeq). While a stream is open, ReadRing returns nothing, so the
// bytes have one path and one order. What was in a ring before the stream
// opened goes with a hint emitted now.
func (b *Backend) pushEvents(ctx context.Context) (<-chan sdk.Event, error) {
	b.pushing.Add(1) // before the stream: no read may take bytes a hint is about to carry
	ch, err := b.events.StreamFill(ctx, b.fillRing)
	if err != nil {
		b.pushing.Add(-1)
		return nil, err
	}
	go func() {
		<-ctx.Done()
		b.pushing.Add(-1)
	}()
	b.mu.Lock()
	waiting := make([]*guest, 0, len(b.byUUID))
	for _, g := range b.byUUID {
		if g.ring.Len() > 0 {
			waiting = append(waiting, g)
		}
	}
	b.mu.Unlock()
	for _, g := range waiting {
		b.events.Emit(sdk.Event{UUID: g.h.UUID, Kind: sdk.EventRingData, Port: ringproto.PortCurrent, Time: time.Now()})
	}
	return ch, nil
}

// fillRing drains the guest's ring into a ring-data event about to be sent,
// marked a heartbeat when it only repeats CONNECTED (sdk.RingRepeat).
func (b *Backend) fillRing(ev *sdk.Event) {
	if ev.Kind != sdk.EventRingData {
		return
	}
	b.mu.Lock()
	g := b.byUUID[ev.UUID]
	b.mu.Unlock()
	if g == nil {
		return
	}
	g.pushMu.Lock()
	defer g.pushMu.Unlock()
	ev.Ring = g.ring.Read(g.ring.Size())
	g.ringSeq++
	ev.RingSeq = g.ringSeq
	// A repeat of CONNECTED may wait to go with others (sdk.RingRepeat).
	ev.Heartbeat = g.repeat.Heartbeat(ev.Ring, time.Now())
}
