package agentmon

import (
	"sync"
	"testing"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// slowLinks holds Attach of one instance until released, like a serial link
// whose chardev socket takes seconds to open.
type slowLinks struct {
	Links
	uuid     string
	entered  chan struct{}
	release  chan struct{}
	enterOne sync.Once
}

func (l *slowLinks) Attach(uuid string, ep *contract.LinkEndpoint) error {
	if uuid == l.uuid {
		l.enterOne.Do(func() { close(l.entered) })
		<-l.release
	}
	return l.Links.Attach(uuid, ep)
}

// done runs f in a goroutine and returns a channel closed when it returned.
func done(f func()) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		f()
	}()
	return ch
}

func newSlowEnv(t *testing.T, slow string) (*env, *slowLinks) {
	var sl *slowLinks
	e := newEnv(t, func(c *Config) {
		sl = &slowLinks{Links: c.Links, uuid: slow, entered: make(chan struct{}), release: make(chan struct{})}
		c.Links = sl
	})
	t.Cleanup(sl.releaseAll)
	return e, sl
}

func (l *slowLinks) releaseAll() {
	select {
	case <-l.release:
	default:
		close(l.release)
	}
}

// TestSlowAttachDoesNotStallOthers checks that while one instance's link is
// being attached, other instances start, stop and are looked up.
func TestSlowAttachDoesNotStallOthers(t *testing.T) {
	e, sl := newSlowEnv(t, "uuid-slow")
	slow, other := e.guest("slow"), e.guest("other")
	running := done(func() { e.svc.GuestRunning(slow.inst, slow.ep) })
	<-sl.entered
	steps := []struct {
		name string
		f    func()
	}{
		{"GuestRunning of another instance", func() { e.svc.GuestRunning(other.inst, other.ep) }},
		{"lookup", func() { e.svc.monitor(other.inst.UUID) }},
		{"GuestStopped of another instance", func() { e.svc.GuestStopped(other.inst) }},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			select {
			case <-done(st.f):
			case <-time.After(20 * time.Second):
				t.Fatalf("%s waited for another instance's Attach", st.name)
			}
		})
	}
	sl.releaseAll()
	<-running
	if e.svc.monitor(slow.inst.UUID) == nil {
		t.Fatal("the slow instance has no monitor")
	}
	if _, ok := e.host.Endpoint(slow.inst.UUID); !ok {
		t.Fatal("the slow instance's link is not attached")
	}
}

// TestStopDuringAttachEndsDetached checks that GuestStopped called while
// GuestRunning of the same instance is attaching leaves it detached and
// without a monitor.
func TestStopDuringAttachEndsDetached(t *testing.T) {
	e, sl := newSlowEnv(t, "uuid-g")
	g := e.guest("g")
	running := done(func() { e.svc.GuestRunning(g.inst, g.ep) })
	<-sl.entered
	stopped := done(func() { e.svc.GuestStopped(g.inst) })
	sl.releaseAll()
	<-running
	<-stopped
	if e.svc.monitor(g.inst.UUID) != nil {
		t.Fatal("a monitor runs after GuestStopped")
	}
	if ep, ok := e.host.Endpoint(g.inst.UUID); ok {
		t.Fatalf("the link is attached (%+v) after GuestStopped", ep)
	}
	n := e.svc.ops.Len()
	if n != 0 {
		t.Fatalf("%d instance locks left behind", n)
	}
}
