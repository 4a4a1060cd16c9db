package components

import (
	"fmt"
	"time"
)

// Fleet is the overview's readiness section.
type Fleet struct {
	Backends []FleetChart
	// Slowest are the recent boots that took longest to become Ready.
	Slowest []SlowBoot
	// Overdue are the instances running without Ready for longer than the
	// usual time of their backend (p95 of its recent boots).
	Overdue []Overdue
	Err     string
}

// BackendFleet is the input of a backend's chart: the sorted times to
// agent and to Ready of its recent boots, and its usual time to Ready (0:
// too few boots to say).
type BackendFleet struct {
	Backend      string
	Agent, Ready []time.Duration
	Usual        time.Duration
	Stats        []FleetStat
}

// FleetStat sums up one distribution in words.
type FleetStat struct {
	Label         string
	N             int
	P50, P95, Max time.Duration
}

// Text is the stat as a sentence.
func (s FleetStat) Text() string {
	if s.N == 0 {
		return s.Label + ": no boot yet"
	}
	return fmt.Sprintf("%s: %s, median %s, p95 %s, slowest %s", s.Label, Plural(s.N, "boot"), Duration(s.P50), Duration(s.P95), Duration(s.Max))
}

// SlowBoot is one of the slowest recent boots.
type SlowBoot struct {
	Name, Backend string
	Started       time.Time
	TimeToReady   time.Duration
}

// Overdue is an instance running without Ready for longer than usual.
type Overdue struct {
	Name, Backend  string
	Running, Usual time.Duration
}

// FleetChart is a backend's histogram: time to agent and time to Ready of
// its recent boots in FleetBins bins on a shared scale, as SVG bars.
type FleetChart struct {
	BackendFleet
	Scale  time.Duration
	Bins   []FleetBin
	Ticks  []ChartTick
	UsualX float64 // 0: no usual time
}

// FleetBin is one bin: its range and the bars of both series.
type FleetBin struct {
	From, To       time.Duration
	Agent, Ready   int
	X, W           float64
	AgentY, AgentH float64
	ReadyY, ReadyH float64
}

// Geometry of the fleet charts (SVG user units).
const (
	FleetWidth  = 600
	FleetHeight = 150
	FleetBins   = 12
	fleetLeft   = 30
	fleetRight  = 575
	fleetTop    = 10
	fleetBase   = 125 // the bars' baseline; tick labels below
)

// Title is a bin's tooltip.
func (b FleetBin) Title() string {
	return fmt.Sprintf("%s – %s: %d agent connected, %d Ready", Duration(b.From), Duration(b.To), b.Agent, b.Ready)
}

// BuildFleetChart bins a backend's times on a scale that shows every boot.
func BuildFleetChart(f BackendFleet) FleetChart {
	c := FleetChart{BackendFleet: f}
	var longest time.Duration
	if n := len(f.Agent); n > 0 {
		longest = f.Agent[n-1]
	}
	if n := len(f.Ready); n > 0 {
		longest = max(longest, f.Ready[n-1])
	}
	c.Scale = niceScale(longest + longest/20 + 1)
	width := c.Scale / FleetBins
	bins := make([]FleetBin, FleetBins)
	bin := func(d time.Duration) int { return min(int(d/width), FleetBins-1) }
	for _, d := range f.Agent {
		bins[bin(d)].Agent++
	}
	for _, d := range f.Ready {
		bins[bin(d)].Ready++
	}
	peak := 1
	for _, b := range bins {
		peak = max(peak, b.Agent, b.Ready)
	}
	x := func(d time.Duration) float64 {
		return fleetLeft + float64(d)/float64(c.Scale)*(fleetRight-fleetLeft)
	}
	h := func(n int) float64 { return float64(n) / float64(peak) * (fleetBase - fleetTop) }
	for i := range bins {
		b := &bins[i]
		b.From, b.To = width*time.Duration(i), width*time.Duration(i+1)
		b.X = x(b.From) + 1
		b.W = (x(b.To) - x(b.From) - 2) / 2
		b.AgentH, b.ReadyH = h(b.Agent), h(b.Ready)
		b.AgentY, b.ReadyY = fleetBase-b.AgentH, fleetBase-b.ReadyH
	}
	c.Bins = bins
	for i := 0; i <= 4; i++ {
		d := c.Scale / 4 * time.Duration(i)
		c.Ticks = append(c.Ticks, ChartTick{X: x(d), Label: Duration(d)})
	}
	if f.Usual > 0 {
		c.UsualX = x(f.Usual)
	}
	return c
}
