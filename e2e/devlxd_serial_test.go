package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
)

// TestDevlxdSerialSim runs a sim guest on the serial link (sim.link=serial:
// link/serialmux over a virtio-serial port relayed by its VMM, as QEMU's
// serial link) with the real agent: the agent connects over it, the
// instance reports the serial link, and the guest's devlxd answers and
// declares Ready through it.
func TestDevlxdSerialSim(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	const name = "serial1"
	g := d.launch(ctx, name, map[string]string{"sim.link": "serial", "user.x": "over serial"}, nil)
	inst, err := d.client.Instance(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if inst.Link != "serial" {
		t.Fatalf("instance link = %q, want serial", inst.Link)
	}
	if a := curlDevlxd(ctx, t, g.socket, "GET", "/1.0/config/user.x", ""); a.status != 200 || string(a.body) != "over serial" {
		t.Fatalf("GET /1.0/config/user.x over the serial link = %d %q", a.status, a.body)
	}
	if a := curlDevlxd(ctx, t, g.socket, "PATCH", "/1.0", `{"state":"Ready"}`); a.status != 200 {
		t.Fatalf("PATCH /1.0 Ready over the serial link = %d %q", a.status, strings.TrimSpace(string(a.body)))
	}
	d.waitInstance(ctx, name, "Ready", time.Minute, func(i *api.Instance) bool { return i.Status == "Ready" })
}
