package eventhub

import (
	"testing"

	"github.com/guestlink/guestlink/link/devlxdapi"
)

func TestFilterAndDrop(t *testing.T) {
	var h Hub
	all := h.Subscribe(nil)
	cfg := h.Subscribe([]string{devlxdapi.EventConfig})
	lag := h.Subscribe([]string{devlxdapi.EventDevice})

	if n := h.Publish(devlxdapi.Event{Type: devlxdapi.EventConfig}); n != 2 {
		t.Fatalf("Publish config reached %d, want 2", n)
	}
	if e := <-cfg.Events(); e.Type != devlxdapi.EventConfig {
		t.Fatalf("cfg got %q", e.Type)
	}
	if e := <-all.Events(); e.Type != devlxdapi.EventConfig {
		t.Fatalf("all got %q", e.Type)
	}
	// lag never reads: after Buffer device events it is dropped.
	for i := 0; i < Buffer+1; i++ {
		h.Publish(devlxdapi.Event{Type: devlxdapi.EventDevice})
		for len(all.Events()) > 0 {
			<-all.Events()
		}
	}
	n := 0
	for range lag.Events() {
		n++
	}
	if n != Buffer {
		t.Fatalf("lagging subscriber got %d events before close, want %d", n, Buffer)
	}
	if h.Len() != 2 {
		t.Fatalf("Len = %d, want 2", h.Len())
	}
	h.Close()
	if _, ok := <-cfg.Events(); ok {
		t.Fatalf("cfg channel open after hub Close")
	}
	late := h.Subscribe(nil)
	if _, ok := <-late.Events(); ok {
		t.Fatalf("subscription after Close is open")
	}
	all.Close() // idempotent after hub Close
}
