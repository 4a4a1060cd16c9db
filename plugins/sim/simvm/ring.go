package simvm

import (
	"encoding/json"
	"errors"
	"log"
	"os"
	"sync/atomic"
	"time"
)

// ringDataInterval is the least time between two RING_DATA announcements:
// a guest flooding its port would otherwise have the VMM, the plugin and
// the daemon pass announcements as fast as they can take them.
const ringDataInterval = 20 * time.Millisecond

// ringLoop copies the wired port into the ring buffer and announces the
// writes: at once after a quiet spell, then at most once per
// ringDataInterval, each announcement counting the bytes since the last.
func (v *vmm) ringLoop() {
	var pending atomic.Int64
	notify := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range notify {
			if n := pending.Swap(0); n > 0 {
				v.emit(EventRingData, RingData{Port: v.ringPort, Bytes: int(n)}, EventRingData)
				time.Sleep(ringDataInterval) // pacing, not waiting for anything
			}
		}
	}()
	defer func() {
		close(notify)
		<-done
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := v.fifo.Read(buf)
		if n > 0 {
			v.ring.Write(buf[:n])
			v.received.Add(uint64(n))
			pending.Add(int64(n))
			select {
			case notify <- struct{}{}:
			default:
			}
		}
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				log.Printf("reading port %s: %v", v.ringPort, err)
			}
			return
		}
	}
}

// emit sends an event to every subscribed connection. Events with a
// coalesce key are dropped for a subscriber that has one still queued.
func (v *vmm) emit(name string, data any, coalesce string) {
	raw, err := json.Marshal(data)
	if err != nil {
		log.Printf("encoding %s event: %v", name, err)
		return
	}
	ev := Event{Event: name, Data: raw, Timestamp: timestampOf(time.Now())}
	v.mu.Lock()
	defer v.mu.Unlock()
	for c := range v.subs {
		c.events.Push(ev, coalesce)
	}
}
