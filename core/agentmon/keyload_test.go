package agentmon

import (
	"sync"
	"testing"

	"github.com/guestlink/guestlink/core/pki"
)

// blockingCerts is a key store whose Instance of one instance waits until
// the test releases it (a slow disk, a restart loading every guest's
// pairs at once).
type blockingCerts struct {
	*pki.Store
	slow    string
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (c *blockingCerts) Instance(name string) (*pki.InstanceCerts, error) {
	if name == c.slow {
		c.once.Do(func() { close(c.entered) })
		<-c.release
	}
	return c.Store.Instance(name)
}

// TestKeyLoadOutsideServiceLock: GuestRunning loads the instance's key
// pairs before it takes the Service's lock. Tried: guest a's load blocks;
// meanwhile guest b's GuestRunning returns with its monitor made, and a
// lookup under the Service's lock (Agent, a list's every row) answers;
// after the release a is monitored too.
func TestKeyLoadOutsideServiceLock(t *testing.T) {
	bc := &blockingCerts{slow: "a", entered: make(chan struct{}), release: make(chan struct{})}
	e := newEnv(t, func(cfg *Config) {
		bc.Store = cfg.Certs.(*pki.Store)
		cfg.Certs = bc
	})
	a, b := e.guest("a"), e.guest("b")
	runningA := make(chan struct{})
	go func() {
		e.svc.GuestRunning(a.inst, a.ep)
		close(runningA)
	}()
	<-bc.entered
	// With the load under the Service's lock, b's GuestRunning and the
	// lookups would wait for a's load (the test would hang here).
	e.svc.GuestRunning(b.inst, b.ep)
	if e.svc.monitor(b.inst.UUID) == nil {
		t.Fatal("b has no monitor after its GuestRunning returned")
	}
	if e.svc.monitor(a.inst.UUID) != nil {
		t.Fatal("a has a monitor before its key pairs were loaded")
	}
	select {
	case <-runningA:
		t.Fatal("a's GuestRunning returned before its key load was released")
	default:
	}
	close(bc.release)
	<-runningA
	if e.svc.monitor(a.inst.UUID) == nil {
		t.Fatal("a has no monitor after its GuestRunning returned")
	}
}
