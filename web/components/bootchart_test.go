package components

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestBuildBootChart(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	created := TimelineItem{Time: at(-1000), Boot: 0, Kind: "state", To: "stopped"}
	boot := func(b int64, startMS int, rest ...TimelineItem) []TimelineItem {
		out := []TimelineItem{{Time: at(startMS), Boot: b, Kind: "state", From: "stopped", To: "running"}}
		for _, r := range rest {
			r.Boot = b
			r.Time = at(startMS + int(r.Time.Sub(time.Time{})/time.Millisecond))
			out = append(out, r)
		}
		return out
	}
	ev := func(ms int, kind, to string) TimelineItem {
		return TimelineItem{Time: time.Time{}.Add(time.Duration(ms) * time.Millisecond), Kind: kind, To: to}
	}
	type rowWant struct {
		boot    int64
		phases  []string
		marks   []string
		summary string
	}
	for _, tc := range []struct {
		name    string
		items   []TimelineItem
		running bool
		now     time.Time
		want    []rowWant
	}{
		{
			name: "one boot to Ready, still running",
			items: slices.Concat([]TimelineItem{created}, boot(1, 0,
				ev(300, "agent", "started"), ev(500, "agent", "connected"), ev(1200, "ready", "true"))),
			running: true, now: at(60000),
			want: []rowWant{{1, []string{PhaseBoot, PhaseAgent, PhaseWait, PhaseReady}, []string{"ready"}, "✓ Ready in 1.2s"}},
		},
		{
			name:    "running, agent connected, not Ready yet",
			items:   boot(1, 0, ev(400, "agent", "connected")),
			running: true, now: at(5000),
			want: []rowWant{{1, []string{PhaseBoot, PhaseWait}, nil, "… running 5.0s, not Ready yet"}},
		},
		{
			name: "earlier boots as rows, newest first, with lost and stop",
			items: slices.Concat(
				boot(1, 0, ev(500, "agent", "connected"), ev(900, "ready", "true"), ev(2000, "agent", "lost"), ev(3000, "state", "stopped")),
				boot(2, 10000, ev(700, "agent", "connected"), ev(1500, "state", "error")),
				boot(3, 20000, ev(200, "agent", "started")),
			),
			running: true, now: at(21000),
			want: []rowWant{
				{3, []string{PhaseBoot, PhaseAgent}, nil, "… running 1.0s, not Ready yet"},
				{2, []string{PhaseBoot, PhaseWait}, []string{"error"}, "■ error after 1.5s, never Ready"},
				{1, []string{PhaseBoot, PhaseWait, PhaseReady, PhaseLost}, []string{"ready", "lost", "stopped"}, "✓ Ready in 900ms; agent lost at 2.0s"},
			},
		},
		{
			name:  "unready goes back to waiting",
			items: boot(1, 0, ev(100, "agent", "connected"), ev(200, "ready", "true"), ev(300, "ready", "false"), ev(400, "ready", "true"), ev(500, "state", "stopped")),
			want:  []rowWant{{1, []string{PhaseBoot, PhaseWait, PhaseReady, PhaseWait, PhaseReady}, []string{"ready", "stopped"}, "✓ Ready in 200ms"}},
		},
		{name: "never started", items: []TimelineItem{created}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := BuildBootChart("web1", tc.items, tc.running, tc.now)
			if len(c.Rows) != len(tc.want) {
				t.Fatalf("%d rows, want %d", len(c.Rows), len(tc.want))
			}
			for i, w := range tc.want {
				r := c.Rows[i]
				var phases, marks []string
				prevEnd := 0.0
				for _, s := range r.Segments {
					phases = append(phases, s.Phase)
					if s.X < chartLeft || s.X+s.W > chartRight+1.5 || s.X+0.05 < prevEnd {
						t.Errorf("boot %d: segment %+v outside the plot or overlapping the previous one", r.Boot, s)
					}
					prevEnd = s.X + s.W
				}
				for _, m := range r.Marks {
					marks = append(marks, m.Kind)
				}
				if r.Boot != w.boot || !slices.Equal(phases, w.phases) || !slices.Equal(marks, w.marks) || r.Summary != w.summary {
					t.Errorf("row %d: boot %d phases %v marks %v %q; want boot %d phases %v marks %v %q", i, r.Boot, phases, marks, r.Summary, w.boot, w.phases, w.marks, w.summary)
				}
			}
		})
	}
}

func TestBootChartScale(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	items := []TimelineItem{
		{Time: t0, Boot: 1, Kind: "state", To: "running"},
		{Time: t0.Add(1200 * time.Millisecond), Boot: 1, Kind: "ready", To: "true"},
		{Time: t0.Add(3 * time.Hour), Boot: 1, Kind: "state", To: "stopped"},
		{Time: t0.Add(4 * time.Hour), Boot: 2, Kind: "state", To: "running"},
		{Time: t0.Add(4*time.Hour + 3500*time.Millisecond), Boot: 2, Kind: "ready", To: "true"},
	}
	c := BuildBootChart("web1", items, true, t0.Add(5*time.Hour))
	// Scaled to the slowest time to Ready (3.5 s) plus a margin, not to the
	// hours each boot then ran.
	if c.Scale != 5*time.Second {
		t.Fatalf("scale %s, want 5s", c.Scale)
	}
	var labels []string
	for _, tk := range c.Ticks {
		labels = append(labels, tk.Label)
	}
	if strings.Join(labels, " ") != "0ms 1.2s 2.5s 3.8s 5.0s" {
		t.Errorf("ticks %v", labels)
	}
	last := c.Rows[1].Segments[len(c.Rows[1].Segments)-1]
	if last.Phase != PhaseReady || !last.Clipped || last.X+last.W != chartRight {
		t.Errorf("boot 1's Ready bar %+v: want it clipped at the right edge", last)
	}
}

func TestNiceScale(t *testing.T) {
	for _, tc := range []struct{ in, want time.Duration }{
		{0, time.Second},
		{1100 * time.Millisecond, 2 * time.Second},
		{4200 * time.Millisecond, 5 * time.Second},
		{9 * time.Second, 10 * time.Second},
		{13 * time.Second, 20 * time.Second},
		{7 * time.Minute, 500 * time.Second},
	} {
		if got := niceScale(tc.in); got != tc.want {
			t.Errorf("niceScale(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
