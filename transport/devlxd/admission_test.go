package devlxd

import (
	"testing"
	"time"
)

// TestLIFOTokens: tokens go to the newest waiter still waiting; waiters
// that gave up are skipped and do not pile up.
func TestLIFOTokens(t *testing.T) {
	stop := make(chan struct{})
	p := newLIFOTokens(1)
	if !p.acquire(time.Hour, stop) {
		t.Fatal("the free token was refused")
	}
	// Waiters that give up while the token is taken leave nothing behind.
	for range 200 {
		if p.acquire(0, stop) {
			t.Fatal("a token was granted while none was free")
		}
	}
	if n := p.waiting(); n != 0 {
		t.Fatalf("%d waiting after every waiter gave up, want 0", n)
	}
	if len(p.waiters) > 128 {
		t.Fatalf("%d abandoned waiters kept, want them compacted", len(p.waiters))
	}
	got := make(chan int, 3)
	for i := range 3 {
		go func() {
			if p.acquire(time.Hour, stop) {
				got <- i
			}
		}()
		waitUntil(t, "the waiter queued", func() bool { return p.waiting() == i+1 })
	}
	for want := 2; want >= 0; want-- {
		p.release()
		if g := <-got; g != want {
			t.Fatalf("token went to waiter %d, want %d (the newest)", g, want)
		}
	}
	p.release()
	if n := p.inUse(); n != 0 {
		t.Fatalf("%d tokens in use after every release, want 0", n)
	}
	// A shut-down server's waiters give up.
	p.acquire(time.Hour, stop)
	done := make(chan bool)
	go func() { done <- p.acquire(time.Hour, stop) }()
	waitUntil(t, "the waiter queued", func() bool { return p.waiting() == 1 })
	close(stop)
	if <-done {
		t.Fatal("a waiter got a token after stop")
	}
}
