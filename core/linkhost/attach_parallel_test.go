package linkhost

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// blockingSerial is a serial transport whose Open of one path waits until
// the test releases it (a guest whose serial channel is slow to open);
// other paths open at once.
type blockingSerial struct {
	fakeSerial
	slow    string
	entered chan struct{} // closed when Open of slow began
	release chan struct{} // Open of slow returns once closed
	once    sync.Once
}

func (b *blockingSerial) Open(ctx context.Context, path string) (SerialSession, error) {
	if path == b.slow {
		b.once.Do(func() { close(b.entered) })
		<-b.release
	}
	return b.fakeSerial.Open(ctx, path)
}

// TestAttachOfOneInstanceDoesNotWaitForAnother: a restarted daemon attaches
// every running guest's link from its recovery workers. Tried: instance A's
// serial session is held open (its Open blocks); meanwhile the links of
// instances B (serial) and C (hybrid) attach and detach, B is dialled,
// while A's Attach still waits. A Detach of A itself waits for A's Attach
// (one instance's calls stay in order), and after the release A is
// attached, then detached.
func TestAttachOfOneInstanceDoesNotWaitForAnother(t *testing.T) {
	bs := &blockingSerial{
		fakeSerial: fakeSerial{sessions: map[string]*fakeSession{}},
		slow:       "/run/vm/a.sock",
		entered:    make(chan struct{}),
		release:    make(chan struct{}),
	}
	h := newHost(t, Config{Serial: bs})
	attachedA := make(chan error, 1)
	go func() {
		attachedA <- h.Attach("uuid-a", &contract.LinkEndpoint{Kind: contract.LinkSerial, Path: bs.slow})
	}()
	<-bs.entered

	// B and C attach while A's Attach is blocked in its Open: with one
	// lock for every instance they would wait for A (the test would
	// hang here until its timeout).
	if err := h.Attach("uuid-b", &contract.LinkEndpoint{Kind: contract.LinkSerial, Path: "/run/vm/b.sock"}); err != nil {
		t.Fatal(err)
	}
	epC := &contract.LinkEndpoint{Kind: contract.LinkHybrid, Path: filepath.Join(t.TempDir(), "link.sock")}
	if err := h.Attach("uuid-c", epC); err != nil {
		t.Fatal(err)
	}
	c, err := h.DialAgent(context.Background(), "uuid-b")
	if err != nil {
		t.Fatalf("dialing uuid-b while A attaches: %v", err)
	}
	c.Close()
	h.Detach("uuid-b")
	h.Detach("uuid-c")
	if _, err := h.DialAgent(context.Background(), "uuid-b"); err == nil {
		t.Fatal("uuid-b still dialable after Detach")
	}
	select {
	case err := <-attachedA:
		t.Fatalf("A's Attach returned before its Open was released: %v", err)
	default:
	}

	// A Detach of A waits for A's Attach, then detaches what it attached.
	detachedA := make(chan struct{})
	go func() {
		h.Detach("uuid-a")
		close(detachedA)
	}()
	close(bs.release)
	if err := <-attachedA; err != nil {
		t.Fatal(err)
	}
	<-detachedA
	if _, err := h.DialAgent(context.Background(), "uuid-a"); err == nil {
		t.Fatal("uuid-a still dialable after its Detach")
	}
	select {
	case <-bs.sessions[bs.slow].accept.done:
	default:
		t.Fatal("Detach of A left its serial session open")
	}
	left := h.ops.Len()
	if left != 0 {
		t.Fatalf("%d instance locks left after every call returned", left)
	}
}
