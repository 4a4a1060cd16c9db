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

// TestParseReportRefreshes: BenchmarkFleet's idle line finds the report
// refreshes in the daemon's goroutine dump (pprof debug=1): the refresher's
// goroutine, the fetches by their count, the first group after the dump's
// header included; other goroutines count for nothing.
func TestParseReportRefreshes(t *testing.T) {
	const refresher = "1 @ 0x1 0x2\n#\t0x1\tgithub.com/guestlink/guestlink/core/agentmon.(*refresher).run+0x1\treports.go:1\n"
	const fetches = "7 @ 0x3 0x4\n#\t0x3\tnet/http.(*persistConn).roundTrip+0x1\tx.go:1\n#\t0x4\tgithub.com/guestlink/guestlink/core/agentmon.(*monitor).fetchGuestLocked.func1+0x1\tguest.go:1\n"
	const advert = "2 @ 0x5\n#\t0x5\tgithub.com/guestlink/guestlink/core/agentmon.(*monitor).fetchAfterAdvert+0x1\treports.go:1\n"
	const other = "900 @ 0x6\n#\t0x6\tgithub.com/guestlink/guestlink/core/agentmon.(*monitor).steps+0x1\tmonitor.go:1\n"
	const header = "goroutine profile: total 910\n"
	for _, tc := range []struct {
		name      string
		dump      string
		refresher bool
		fetches   int
	}{
		{"idle: no refresh", header + other, false, 0},
		{"the refresher first after the header", header + refresher + "\n" + other, true, 0},
		{"fetches counted, the refresher's and the advertisements'", header + other + "\n" + fetches + "\n" + advert, false, 9},
		{"both", header + fetches + "\n" + refresher, true, 7},
		{"not a dump", "404 page not found\n", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := parseReportRefreshes(tc.dump)
			if got.refresher != tc.refresher || got.fetches != tc.fetches {
				t.Fatalf("parseReportRefreshes = %+v, want refresher %v, %d fetches", got, tc.refresher, tc.fetches)
			}
			if got.pending() != (tc.refresher || tc.fetches > 0) {
				t.Fatalf("pending() = %v", got.pending())
			}
		})
	}
}
