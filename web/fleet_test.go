package web

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
)

// bootEvents publishes the lifecycle events of one boot of name starting at
// t0: agent connected after agentMS and Ready after readyMS (0: never),
// then stopped after stopMS (0: still running).
func bootEvents(t testing.TB, ev *busEvents, name string, t0 time.Time, agentMS, readyMS, stopMS int) {
	t.Helper()
	pub := func(action string, ms int) {
		e := events.NewLifecycle(action, name, nil, &events.Requestor{Protocol: "backend"})
		e.Timestamp = t0.Add(time.Duration(ms) * time.Millisecond)
		if _, err := ev.Publish(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	pub(events.InstanceStarted, 0)
	if agentMS > 0 {
		pub(events.InstanceAgentConnected, agentMS)
	}
	if readyMS > 0 {
		pub(events.InstanceReady, readyMS)
		pub(events.InstanceReady, readyMS+500) // a repeat: not a new Ready
	}
	if stopMS > 0 {
		pub(events.InstanceStopped, stopMS)
	}
}

func TestBootSamples(t *testing.T) {
	ev := newBusEvents()
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	bootEvents(t, ev, "a", t0, 300, 1000, 5000)
	bootEvents(t, ev, "a", t0.Add(time.Minute), 400, 0, 2000) // stopped before Ready
	bootEvents(t, ev, "b", t0, 200, 0, 0)                     // still booting
	evs, _ := ev.Recent(context.Background(), events.TypeLifecycle, 100)
	got := bootSamples(evs)
	want := []bootSample{
		{name: "a", start: t0, agent: 300 * time.Millisecond, ready: time.Second},
		{name: "a", start: t0.Add(time.Minute), agent: 400 * time.Millisecond},
		{name: "b", start: t0, agent: 200 * time.Millisecond},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("boots %+v, want %+v", got, want)
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 20; i++ {
		ds = append(ds, time.Duration(i)*time.Second)
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{0.5, 10 * time.Second}, {0.95, 19 * time.Second}, {1, 20 * time.Second}, {0, time.Second}} {
		if got := percentile(ds, tc.p); got != tc.want {
			t.Errorf("percentile(%v) = %s, want %s", tc.p, got, tc.want)
		}
	}
	if percentile(nil, 0.5) != 0 {
		t.Error("percentile of nothing")
	}
}

func TestFleetReadiness(t *testing.T) {
	ev := newBusEvents()
	now := time.Now()
	t0 := now.Add(-time.Hour)
	var insts []*instance.Instance
	// Ten sim boots Ready in 1..10 s (p95: 10 s); one qemu boot.
	for i := 1; i <= 10; i++ {
		name := "s" + string(rune('a'+i-1))
		bootEvents(t, ev, name, t0.Add(time.Duration(i)*time.Minute), 500, i*1000, 0)
		insts = append(insts, ready(name, time.Hour, time.Duration(i)*time.Second))
	}
	bootEvents(t, ev, "q1", t0, 20000, 40000, 0)
	q := ready("q1", time.Hour, 40*time.Second)
	q.Backend = "qemu"
	insts = append(insts, q)
	// Running without Ready: one past the usual 10 s, one not yet.
	late, fresh := running("late", instance.AgentConnected), running("fresh", instance.AgentConnected)
	s := now.Add(-30 * time.Second)
	late.StartedAt = &s
	f := now.Add(-3 * time.Second)
	fresh.StartedAt = &f
	insts = append(insts, late, fresh)
	app, _ := newTestApp(newFakeInstances(insts...), ev, Config{})

	_, _, doc := get(t, app, "/")
	var charts []string
	doc.Find(`[data-testid="fleet-chart"]`).Each(func(_ int, c *goquery.Selection) {
		n := 0
		c.Find(`rect[data-series="ready"]`).Each(func(_ int, r *goquery.Selection) { k, _ := strconv.Atoi(r.AttrOr("data-n", "")); n += k })
		charts = append(charts, c.AttrOr("data-backend", "")+":"+strconv.Itoa(n)+":"+c.Find(`[data-testid="fleet-usual"]`).Text())
	})
	if want := []string{"qemu:1:", "sim:10:10.0s"}; !slices.Equal(charts, want) {
		t.Errorf("charts (backend:Ready boots:usual) %v, want %v (qemu has too few boots for a usual time)", charts, want)
	}
	if got := doc.Find(`[data-testid="fleet-stats"]`).Last().Text(); !strings.Contains(got, "Ready: 10 boots, median 5.0s, p95 10.0s, slowest 10.0s") {
		t.Errorf("stats %q", got)
	}
	var slow []string
	doc.Find(`[data-testid="slow-boot"]`).Each(func(_ int, s *goquery.Selection) { slow = append(slow, s.AttrOr("data-name", "")) })
	if want := []string{"q1", "sj", "si", "sh", "sg"}; !slices.Equal(slow, want) {
		t.Errorf("slowest %v, want %v", slow, want)
	}
	var overdue []string
	doc.Find(`[data-testid="overdue-item"]`).Each(func(_ int, s *goquery.Selection) { overdue = append(overdue, s.AttrOr("data-name", "")) })
	if !slices.Equal(overdue, []string{"late"}) {
		t.Errorf("overdue %v, want [late] (running 30s, usual 10s; fresh is within it)", overdue)
	}
	if !strings.Contains(doc.Find(`[data-testid="overdue"]`).Text(), "⚠") {
		t.Error("the overdue note has no icon: colour would be its only sign")
	}

	t.Run("no boots", func(t *testing.T) {
		app, _ := newTestApp(newFakeInstances(), newBusEvents(), Config{})
		_, _, doc := get(t, app, "/")
		if doc.Find(`[data-testid="fleet-empty"]`).Length() != 1 {
			t.Error("no 'no boot yet' note")
		}
	})
}
