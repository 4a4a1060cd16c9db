package e2e

import (
	"testing"
	"time"
)

// TestFleetSettled: the idle window of BenchmarkFleet starts when two
// consecutive CPU windows agree within 20 % (or two /proc ticks).
func TestFleetSettled(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	for _, tc := range []struct {
		name string
		used []time.Duration
		want bool
	}{
		{"no window yet", nil, false},
		{"one window cannot agree with itself", ms(500), false},
		{"still falling after the launch", ms(900, 500), false},
		{"within 20 %", ms(900, 500, 110, 100), true},
		{"just over 20 % and over two ticks", ms(300, 239), false},
		{"exactly 20 %", ms(300, 240), true},
		{"a quiet daemon's windows differ by two ticks", ms(30, 50), true},
		{"three ticks apart on a quiet daemon", ms(20, 50), false},
		{"only the last two count", ms(100, 100, 400), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fleetSettled(tc.used); got != tc.want {
				t.Errorf("fleetSettled(%v) = %v, want %v", tc.used, got, tc.want)
			}
		})
	}
}
