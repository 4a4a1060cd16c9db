package agentmon

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk/contract"
	"github.com/guestlink/guestlink/plugins/sdk/sdktest"
)

// batchBackend reads batches and counts its calls.
type batchBackend struct {
	sdktest.Backend
	mu    sync.Mutex
	calls int
	reads int
}

func (b *batchBackend) ReadRings(_ context.Context, reads []contract.RingRead) ([]contract.RingData, error) {
	b.mu.Lock()
	b.calls++
	b.reads += len(reads)
	b.mu.Unlock()
	out := make([]contract.RingData, len(reads))
	for i, r := range reads {
		if string(r.Handle) == "gone" {
			out[i].Err = fmt.Errorf("no such guest: %w", contract.ErrNotFound)
			continue
		}
		out[i].Data = []byte(string(r.Handle) + "\n")
	}
	return out, nil
}

// TestRingBatcher: concurrent reads of one backend are gathered into
// batches; each gets its own guest's bytes or error.
func TestRingBatcher(t *testing.T) {
	svc, err := New(Config{Instances: &fakeInstances{}, Links: deadLinks{}, Certs: testCerts(t)})
	if err != nil {
		t.Fatal(err)
	}
	be := &batchBackend{}
	if svc.batcher(&sdktest.Backend{}) != nil {
		t.Fatal("a backend without ReadRings got a batcher")
	}
	b := svc.batcher(be)
	if b == nil || svc.batcher(be) != b {
		t.Fatal("a batch backend has not exactly one batcher")
	}
	const n = 300
	var wg sync.WaitGroup
	errs := make(chan error, n+1)
	for i := range n {
		wg.Go(func() {
			h := fmt.Sprintf("g%d", i)
			data, err := b.read(context.Background(), contract.Handle(h), RingReadMax)
			if err != nil || string(data) != h+"\n" {
				errs <- fmt.Errorf("read of %s = %q, %v", h, data, err)
			}
		})
	}
	wg.Go(func() {
		if _, err := b.read(context.Background(), contract.Handle("gone"), RingReadMax); !errors.Is(err, contract.ErrNotFound) {
			errs <- fmt.Errorf("read of a gone guest: %v, want contract.ErrNotFound", err)
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	be.mu.Lock()
	defer be.mu.Unlock()
	if be.reads != n+1 || be.calls > be.reads || be.calls < (n+1+ringBatchMax-1)/ringBatchMax {
		t.Fatalf("%d reads in %d calls, want %d reads in batches of at most %d", be.reads, be.calls, n+1, ringBatchMax)
	}
	t.Logf("%d reads in %d calls", be.reads, be.calls)
}

// TestRingBatcherLoneReadAtOnce: a read that finds the batcher idle is not
// held back to gather others (a guest's first word must be read before the
// next one overwrites it in a 16-byte ring); reads that come while a batch
// is out gather for ringBatchLinger. Time is synctest's: the first read
// takes no time, the next batch exactly the linger.
func TestRingBatcherLoneReadAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc, err := New(Config{Instances: &fakeInstances{}, Links: deadLinks{}, Certs: testCerts(t)})
		if err != nil {
			t.Fatal(err)
		}
		b := svc.batcher(&batchBackend{})
		start := time.Now()
		if data, err := b.read(context.Background(), contract.Handle("g1"), RingReadMax); err != nil || string(data) != "g1\n" {
			t.Fatalf("lone read = %q, %v", data, err)
		}
		if took := time.Since(start); took != 0 {
			t.Fatalf("a lone read took %v of fake time, want 0 (no linger)", took)
		}
		start = time.Now()
		if _, err := b.read(context.Background(), contract.Handle("g2"), RingReadMax); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took != ringBatchLinger {
			t.Fatalf("a read right after a batch took %v, want the linger %v", took, ringBatchLinger)
		}
		// The batcher ends once a linger passes with nothing queued
		// (fake time: the sleep takes none).
		time.Sleep(ringBatchLinger)
		synctest.Wait()
	})
}
