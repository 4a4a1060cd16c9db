package instance

import (
	"context"
	"fmt"
	"time"

	"github.com/guestlink/guestlink/core/status"
	"github.com/guestlink/guestlink/errdefs"
)

// CondOutOfMemory is the condition an instance carries once its guest's
// kernel killed a process for want of memory this boot (True, reason
// ReasonOOMKilled); an instance without such a kill does not list it.
const CondOutOfMemory = "OutOfMemory"

// ReasonOOMKilled is the reason of CondOutOfMemory.
const ReasonOOMKilled = "OOMKilled"

// InstanceOOMKill is the lifecycle action published for every OOM kill
// reported of a guest; its context carries "process", "pid", "source" and
// "kills" (this boot's count), and the first of a boot the new condition.
const InstanceOOMKill = "instance-oom-kill"

// Sources of an OOM kill.
const (
	OOMSourceConsole = "console" // the kernel's line on the console log
	OOMSourceAgent   = "agent"   // the guest's /proc/vmstat oom_kill counter
)

// OOMKill is one process the guest's kernel killed for want of memory.
type OOMKill struct {
	Process string // the killed task's name; "" when the source does not know it
	PID     int
	Time    time.Time // when the daemon learned of it
	Source  string    // OOMSourceConsole or OOMSourceAgent
	// Count > 1 says the report carries that many kills, this one the
	// last (a console that showed several between two reports).
	Count int
}

// oomState is what the daemon knows of this boot's OOM kills.
type oomState struct {
	seen    int     // kills the console showed
	counter uint64  // the guest's oom_kill counter, as the agent last said
	last    OOMKill // the last kill with a name (or the last at all)
}

// kills returns how many kills this boot: the sources see the same kills,
// so the larger count.
func (o oomState) kills() uint64 { return max(uint64(o.seen), o.counter) }

// ReportOOMKill records that the kernel of the running instance with the
// given uuid killed a process for want of memory (a console line). The
// instance gets (or keeps) the OutOfMemory condition with the kill's
// process and time, and InstanceOOMKill is published (one event for a
// report of k.Count kills). An instance that
// does not run is errdefs.ErrConflict.
func (m *Manager) ReportOOMKill(ctx context.Context, uuid string, k OOMKill) error {
	return m.reportOOM(ctx, uuid, k, func(o *oomState) bool { o.seen += max(k.Count, 1); return true })
}

// ReportOOMCounter records the guest's oom_kill counter (/proc/vmstat) as
// the agent reports it. A counter above what the daemon knew is a kill
// (the console may have shown it already: the count is the larger of
// both); the same or a lower one changes nothing.
func (m *Manager) ReportOOMCounter(ctx context.Context, uuid string, counter uint64) error {
	k := OOMKill{Source: OOMSourceAgent}
	return m.reportOOM(ctx, uuid, k, func(o *oomState) bool {
		if counter <= o.kills() {
			o.counter = max(o.counter, counter)
			return false
		}
		o.counter = counter
		return true
	})
}

func (m *Manager) reportOOM(ctx context.Context, uuid string, k OOMKill, count func(*oomState) bool) error {
	e, err := m.lookupUUID(ctx, uuid)
	if err != nil {
		return fmt.Errorf("reporting an OOM kill: %w", err)
	}
	var name string
	_, err = m.mutate(ctx, e, func(c *change) error {
		name = c.rec.Name
		if c.rec.PowerState != status.PowerRunning {
			return fmt.Errorf("instance is not running: %w", errdefs.ErrConflict)
		}
		if !count(&c.rt.oom) {
			return nil
		}
		if k.Time.IsZero() {
			k.Time = c.now
		}
		if k.Process != "" || c.rt.oom.last.Process == "" {
			c.rt.oom.last = k
		} else {
			c.rt.oom.last.Time = k.Time
		}
		ctxm := map[string]any{"source": k.Source, "kills": c.rt.oom.kills()}
		if k.Process != "" {
			ctxm["process"], ctxm["pid"] = k.Process, k.PID
		}
		c.emit(InstanceOOMKill, ctxm, byDaemon)
		return nil
	})
	if err != nil {
		if name == "" {
			return fmt.Errorf("reporting an OOM kill of instance %s: %w", uuid, err)
		}
		return fmt.Errorf("reporting an OOM kill of instance %q: %w", name, err)
	}
	if k.Process != "" {
		m.log.Warn("guest killed a process for want of memory", "instance", name, "process", k.Process, "pid", k.PID, "source", k.Source)
	} else {
		m.log.Warn("guest killed a process for want of memory", "instance", name, "source", k.Source)
	}
	return nil
}

// oomCondition returns the OutOfMemory condition of a running instance
// whose guest had an OOM kill this boot.
func oomCondition(running bool, rt *runtime) (Condition, bool) {
	o := rt.oom
	n := o.kills()
	if !running || n == 0 {
		return Condition{}, false
	}
	what := "a process"
	if o.last.Process != "" {
		what = fmt.Sprintf("%s (pid %d)", o.last.Process, o.last.PID)
	}
	plural := "s"
	if n == 1 {
		plural = ""
	}
	return Condition{Type: CondOutOfMemory, Status: CondTrue, Reason: ReasonOOMKilled,
		Message: fmt.Sprintf("the guest's kernel killed %s for want of memory at %s (%s); %d kill%s this boot",
			what, o.last.Time.UTC().Format(time.RFC3339), o.last.Source, n, plural)}, true
}
