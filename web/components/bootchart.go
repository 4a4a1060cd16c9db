package components

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"time"
)

// Phases of a boot in the boot timeline chart. Each has a colour (PhaseClass)
// and a name in the legend; rows also say in words how the boot went, so the
// colour is never the only signal.
const (
	PhaseBoot     = "boot"     // running, no agent yet
	PhaseAgent    = "agent"    // agent started, not connected
	PhaseWait     = "wait"     // agent connected, not Ready
	PhaseReady    = "ready"    // Ready
	PhaseLost     = "lost"     // agent lost
	PhaseAgentOff = "agentoff" // agent stopped (the guest shutting down)
)

// PhaseNames are the legend's words for the phases, in boot order.
var PhaseNames = []struct{ Phase, Name string }{
	{PhaseBoot, "booting (no agent yet)"},
	{PhaseAgent, "agent started"},
	{PhaseWait, "agent connected, not Ready"},
	{PhaseReady, "Ready"},
	{PhaseLost, "agent lost"},
	{PhaseAgentOff, "agent stopped"},
}

// PhaseClass returns the SVG fill classes of a phase.
func PhaseClass(phase string) string {
	switch phase {
	case PhaseBoot:
		return "fill-slate-400 dark:fill-slate-500"
	case PhaseAgent:
		return "fill-sky-500"
	case PhaseWait:
		return "fill-amber-400"
	case PhaseReady:
		return "fill-emerald-500"
	case PhaseLost:
		return "fill-red-600"
	}
	return "fill-slate-300 dark:fill-slate-700"
}

// Geometry of the chart, in SVG user units (the viewBox is ChartWidth
// wide and scales with the page).
const (
	ChartWidth  = 1000
	chartLeft   = 80  // the "boot N" labels
	chartRight  = 720 // the bars end here; the summaries follow
	chartTop    = 28  // the axis labels
	chartRowH   = 30
	chartBarH   = 18
	chartSumX   = chartRight + 12
	maxBootRows = 8
)

// BootChart is the boot timeline chart of an instance: one row per boot,
// newest first, on a shared scale of time since each boot's start, so that
// boots compare at a glance.
type BootChart struct {
	Name   string
	Rows   []BootRow
	Ticks  []ChartTick
	Scale  time.Duration // the time at the right end of the bars
	Height int
}

// BootRow is one boot.
type BootRow struct {
	Boot     int64
	Y        int // top of the bar
	Segments []ChartSegment
	Marks    []ChartMark
	// Summary says in words how the boot went ("Ready in 1.2s").
	Summary string
}

// ChartSegment is one phase of a boot: X and W in user units.
type ChartSegment struct {
	Phase    string
	X, W     float64
	From, To time.Duration
	// Clipped: the phase goes on beyond the chart's scale (or until now).
	Clipped bool
}

// ChartMark is a point event on a row: Ready, agent lost, stop, error.
type ChartMark struct {
	Kind  string // "ready", "lost", "stopped", "error"
	Glyph string
	X     float64
	At    time.Duration
}

// ChartTick is a label of the time axis.
type ChartTick struct {
	X     float64
	Label string
}

// Title is a segment's tooltip.
func (s ChartSegment) Title() string {
	name := s.Phase
	for _, p := range PhaseNames {
		if p.Phase == s.Phase {
			name = p.Name
		}
	}
	end := Duration(s.To)
	if s.Clipped {
		end += "+"
	}
	return fmt.Sprintf("%s: %s → %s", name, Duration(s.From), end)
}

// Title is a mark's tooltip.
func (m ChartMark) Title() string { return m.Kind + " at " + Duration(m.At) }

// F formats a user-unit coordinate.
func F(v float64) string { return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64) }

// I formats an integer coordinate.
func I(v int) string { return strconv.Itoa(v) }

// BuildBootChart draws the boots recorded in items (any order; boot 0, the
// creation, is not a boot). running says whether the instance's current
// boot (the highest) still runs: its open phase then extends to now.
func BuildBootChart(name string, items []TimelineItem, running bool, now time.Time) BootChart {
	byBoot := map[int64][]TimelineItem{}
	var boots []int64
	for _, it := range items {
		if it.Boot <= 0 {
			continue
		}
		if _, ok := byBoot[it.Boot]; !ok {
			boots = append(boots, it.Boot)
		}
		byBoot[it.Boot] = append(byBoot[it.Boot], it)
	}
	sort.Slice(boots, func(i, j int) bool { return boots[i] > boots[j] })
	if len(boots) > maxBootRows {
		boots = boots[:maxBootRows]
	}
	c := BootChart{Name: name}
	type span struct {
		phase    string
		from, to time.Duration
		open     bool
	}
	type raw struct {
		boot    int64
		spans   []span
		marks   []ChartMark
		summary string
		key     time.Duration // what the scale must show of this boot
	}
	var rows []raw
	for i, b := range boots {
		es := byBoot[b]
		sort.SliceStable(es, func(i, j int) bool { return es[i].Time.Before(es[j].Time) })
		start := es[0].Time
		for _, e := range es {
			if e.Kind == "state" && (e.To == "running" || e.To == "started") {
				start = e.Time
				break
			}
		}
		at := func(t time.Time) time.Duration { return max(t.Sub(start), 0) }
		r := raw{boot: b}
		phase, since := "", time.Duration(0)
		var readyAt, lostAt, endAt time.Duration = -1, -1, -1
		ended := ""
		move := func(next string, t time.Duration) {
			if phase != "" && t >= since {
				r.spans = append(r.spans, span{phase: phase, from: since, to: t})
			}
			phase, since = next, t
		}
		for _, e := range es {
			t := at(e.Time)
			switch {
			case e.Kind == "state" && (e.To == "running" || e.To == "started"):
				if phase == "" {
					move(PhaseBoot, t)
				}
			case e.Kind == "state" && (e.To == "stopped" || e.To == "error"):
				move("", t)
				endAt, ended = t, e.To
				if e.To == "error" {
					r.marks = append(r.marks, ChartMark{Kind: "error", Glyph: "✗", At: t})
				} else {
					r.marks = append(r.marks, ChartMark{Kind: "stopped", Glyph: "■", At: t})
				}
			case e.Kind == "agent" && e.To == "started":
				move(PhaseAgent, t)
			case e.Kind == "agent" && e.To == "connected":
				if phase == PhaseReady {
					continue
				}
				move(PhaseWait, t)
			case e.Kind == "agent" && e.To == "lost":
				move(PhaseLost, t)
				if lostAt < 0 {
					lostAt = t
				}
				r.marks = append(r.marks, ChartMark{Kind: "lost", Glyph: "!", At: t})
			case e.Kind == "agent" && e.To == "stopped":
				move(PhaseAgentOff, t)
			case e.Kind == "ready" && e.To == "true":
				if phase != PhaseReady {
					move(PhaseReady, t)
				}
				if readyAt < 0 {
					readyAt = t
					r.marks = append(r.marks, ChartMark{Kind: "ready", Glyph: "✓", At: t})
				}
			case e.Kind == "ready" && e.To == "false":
				if phase == PhaseReady {
					move(PhaseWait, t)
				}
			}
		}
		last := at(es[len(es)-1].Time)
		if phase != "" {
			if i == 0 && running {
				endAt = max(at(now), since)
				move("", endAt)
				r.spans[len(r.spans)-1].open = true
			} else {
				move("", last)
			}
		}
		switch {
		case readyAt >= 0:
			r.summary = "✓ Ready in " + Duration(readyAt)
			r.key = readyAt
		case ended != "":
			r.summary = "■ " + ended + " after " + Duration(endAt) + ", never Ready"
			r.key = endAt
		case i == 0 && running:
			r.summary = "… running " + Duration(endAt) + ", not Ready yet"
			r.key = endAt
		default:
			r.summary = "never Ready"
			r.key = last
		}
		if lostAt >= 0 {
			r.summary += "; agent lost at " + Duration(lostAt)
			r.key = max(r.key, lostAt)
		}
		rows = append(rows, r)
	}
	// The scale: the longest time any boot took to its key moment, plus a
	// margin; what comes later (a Ready guest running for hours) is clipped.
	var key time.Duration
	for _, r := range rows {
		key = max(key, r.key)
	}
	c.Scale = niceScale(key + key/5)
	x := func(d time.Duration) float64 {
		return chartLeft + float64(min(d, c.Scale))/float64(c.Scale)*(chartRight-chartLeft)
	}
	step := c.Scale / 4
	for i := 0; i <= 4; i++ {
		c.Ticks = append(c.Ticks, ChartTick{X: x(step * time.Duration(i)), Label: Duration(step * time.Duration(i))})
	}
	for i, r := range rows {
		row := BootRow{Boot: r.boot, Y: chartTop + i*chartRowH, Summary: r.summary}
		for _, s := range r.spans {
			if s.from > c.Scale {
				continue
			}
			w := x(s.to) - x(s.from)
			row.Segments = append(row.Segments, ChartSegment{Phase: s.phase, X: x(s.from), W: max(w, 1.5), From: s.from, To: s.to, Clipped: s.open || s.to > c.Scale})
		}
		for _, m := range r.marks {
			if m.At <= c.Scale {
				m.X = x(m.At)
				row.Marks = append(row.Marks, m)
			}
		}
		c.Rows = append(c.Rows, row)
	}
	c.Height = chartTop + len(rows)*chartRowH + 4
	return c
}

// niceScale rounds d up to 1, 2 or 5 times a power of ten milliseconds
// (at least one second), so that quarter ticks read well.
func niceScale(d time.Duration) time.Duration {
	if d < time.Second {
		return time.Second
	}
	ms := float64(d.Milliseconds())
	p := math.Pow(10, math.Floor(math.Log10(ms)))
	for _, m := range []float64{1, 2, 4, 5, 8, 10} {
		if m*p >= ms {
			return time.Duration(m*p) * time.Millisecond
		}
	}
	return time.Duration(10*p) * time.Millisecond
}
