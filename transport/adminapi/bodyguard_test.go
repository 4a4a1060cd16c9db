package adminapi

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/synctest"
)

// blockingReader blocks each Read until a value arrives on next.
type blockingReader struct {
	next    chan string
	reading chan struct{}
}

func (b *blockingReader) Read(p []byte) (int, error) {
	b.reading <- struct{}{}
	return copy(p, <-b.next), nil
}

// TestBodyGuard: a relayed request body reads through until release;
// release waits for a read in progress; after it, every read fails (the
// stream fasthttp releases when the handler returns is never read again).
func TestBodyGuard(t *testing.T) {
	g := &bodyGuard{r: strings.NewReader("hello")}
	b, err := io.ReadAll(io.LimitReader(g, 3))
	if err != nil || string(b) != "hel" {
		t.Fatalf("read before release: %q, %v", b, err)
	}
	g.release()
	if n, err := g.Read(make([]byte, 8)); n != 0 || !errors.Is(err, errBodyReleased) {
		t.Fatalf("read after release: %d, %v; want errBodyReleased", n, err)
	}

	synctest.Test(t, func(t *testing.T) {
		br := &blockingReader{next: make(chan string), reading: make(chan struct{})}
		g := &bodyGuard{r: br}
		readDone := make(chan error)
		go func() {
			_, err := g.Read(make([]byte, 8))
			readDone <- err
		}()
		<-br.reading // a read is in progress
		released := make(chan struct{})
		go func() {
			g.release()
			close(released)
		}()
		synctest.Wait()
		select {
		case <-released:
			t.Fatal("release returned while a read was in progress")
		default:
		}
		br.next <- "x"
		if err := <-readDone; err != nil {
			t.Fatalf("the read in progress: %v", err)
		}
		<-released
		if _, err := g.Read(make([]byte, 8)); !errors.Is(err, errBodyReleased) {
			t.Fatalf("read after release: %v", err)
		}
	})
}
