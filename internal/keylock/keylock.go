// Package keylock holds one mutex per key, for as long as a caller holds
// or waits for it: operations on one instance run one at a time while
// those on different instances run at once, and the map keeps no entry
// for a key nobody uses.
package keylock

import "sync"

// Map is a set of mutexes by key. The zero value is ready to use.
type Map struct {
	mu sync.Mutex
	m  map[string]*entry
}

type entry struct {
	mu   sync.Mutex
	refs int // callers holding or waiting for mu; guarded by Map.mu
}

// Lock waits until no other holder of key's lock remains and returns the
// function that releases it (to be called once).
func (k *Map) Lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*entry{}
	}
	e := k.m[key]
	if e == nil {
		e = &entry{}
		k.m[key] = e
	}
	e.refs++
	k.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
}

// Len returns how many keys are held or waited for.
func (k *Map) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.m)
}
