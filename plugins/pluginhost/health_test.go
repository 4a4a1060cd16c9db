package pluginhost

import (
	"math"
	"runtime/metrics"
	"testing"
	"time"
)

func TestLateShare(t *testing.T) {
	buckets := []float64{0, 0.001, 0.01, 0.02, 0.1, math.Inf(1)} // 5 buckets
	hist := func(counts ...uint64) *metrics.Float64Histogram {
		return &metrics.Float64Histogram{Counts: counts, Buckets: buckets}
	}
	tests := []struct {
		name          string
		before, after *metrics.Float64Histogram
		want          float64
	}{
		{"no data", nil, hist(1, 1, 1, 1, 1), 0},
		{"nothing scheduled", hist(5, 5, 5, 5, 5), hist(5, 5, 5, 5, 5), 0},
		{"all prompt", hist(0, 0, 0, 0, 0), hist(10, 30, 0, 0, 0), 0},
		{"half late", hist(0, 0, 0, 0, 0), hist(10, 0, 0, 5, 5), 0.5},
		{"only the new samples count", hist(100, 0, 0, 0, 0), hist(100, 0, 0, 3, 1), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := lateShare(tt.before, tt.after, 20*time.Millisecond); got != tt.want {
				t.Fatalf("lateShare = %v, want %v", got, tt.want)
			}
		})
	}
	if readSchedLatencies() == nil {
		t.Fatalf("the runtime has no %s metric", schedLatencies)
	}
}
