package instance

import "sync/atomic"

// ViewCache is one instance's slot for what a lister derives from its view
// and keeps between lists (the admin API keeps each instance's encoded
// JSON there: a list of 10,000 running guests then copies bytes instead of
// encoding them). A value is stored with the change version of the view it
// was derived from and loaded only for that version, so a changed instance
// is never served from an older value.
//
// The version changes with every change of the view but one: a heartbeat
// that only moves Agent.LastHeartbeat (every running guest's, every 5 s)
// keeps it. A value must therefore not hold the heartbeat's time; the
// lister reads it from the view each time.
//
// A ViewCache is safe for concurrent use: concurrent lists may store values
// of different versions in turn, each loaded only for its own. The zero
// value is empty.
type ViewCache struct {
	p atomic.Pointer[cachedValue]
}

// cachedValue is a stored value and its version; never changed once
// stored.
type cachedValue struct {
	version uint64
	v       any
}

// Load returns the value stored for version, or nil.
func (c *ViewCache) Load(version uint64) any {
	if cv := c.p.Load(); cv != nil && cv.version == version {
		return cv.v
	}
	return nil
}

// Store keeps v as the value of version, replacing any other. v must not
// be changed afterwards: concurrent lists read it.
func (c *ViewCache) Store(version uint64, v any) {
	c.p.Store(&cachedValue{version: version, v: v})
}
