package e2e

import (
	"context"
	"testing"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
)

// BenchmarkExecRoundTrip measures `guestlink exec NAME -- true` as the Go
// client makes it, through the real daemon and a real sim guest's agent,
// per link type: POST /1.0/instances/NAME/exec, the four websockets
// (each a new TLS connection over the link, relayed by the daemon), the
// command, and the wait for its exit code.
func BenchmarkExecRoundTrip(b *testing.B) {
	bin := benchBinaries(b)
	d := benchStartDaemon(b, bin, benchNewStateDir(b))
	links := map[string]map[string]string{
		"hybrid": {},
		"serial": {"sim.link": "serial"},
	}
	benchLaunchConnected(b, d, links)
	ctx := context.Background()
	for _, link := range []string{"hybrid", "serial"} {
		b.Run(link, func(b *testing.B) {
			for b.Loop() {
				code, err := d.Client.Exec(ctx, link, api.ExecPost{Command: []string{"true"}}, client.ExecIO{})
				if err != nil || code != 0 {
					b.Fatalf("exec true over the %s link: %d %v", link, code, err)
				}
			}
		})
	}
}
