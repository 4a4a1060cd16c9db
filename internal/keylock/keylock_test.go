package keylock

import (
	"sync"
	"testing"
)

// TestLock: a key's second Lock waits for the first's unlock (an explicit
// signal shows it had not returned), another key's does not wait, and no
// entry is kept once every holder released.
func TestLock(t *testing.T) {
	var k Map
	unlockA := k.Lock("a")
	got := make(chan struct{})
	go func() {
		unlock := k.Lock("a")
		close(got)
		unlock()
	}()
	// Another key is taken while "a" is held: not behind it.
	k.Lock("b")()
	select {
	case <-got:
		t.Fatal("a second Lock of a held key returned before its unlock")
	default:
	}
	unlockA()
	<-got
	if n := k.Len(); n != 0 {
		t.Fatalf("%d keys kept after every holder released, want 0", n)
	}
}

// TestLockConcurrent: many holders of a few keys; each key's critical
// section is never entered twice at once (-race checks the counters).
func TestLockConcurrent(t *testing.T) {
	var k Map
	inside := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 200 {
		key := []string{"a", "b", "c"}[i%3]
		wg.Go(func() {
			unlock := k.Lock(key)
			defer unlock()
			mu.Lock()
			inside[key]++
			n := inside[key]
			mu.Unlock()
			if n != 1 {
				t.Errorf("%d holders of %q at once", n, key)
			}
			mu.Lock()
			inside[key]--
			mu.Unlock()
		})
	}
	wg.Wait()
	if n := k.Len(); n != 0 {
		t.Fatalf("%d keys kept, want 0", n)
	}
}
