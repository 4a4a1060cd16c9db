package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/guestlink/guestlink/agent/agenttest"
	"github.com/guestlink/guestlink/internal/testwait"
	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/sim/simbackend"
)

// TestRealAgent runs the real guestlink-agent as a sim guest (through the
// plugin process, chosen with sim.agent) and checks the whole guest side:
// the agent finds its config drive and the ring port, announces STARTED on
// the 16-byte ring, accepts an advertisement over the hybrid link endpoint
// the backend reports, confirms CONNECTED on the ring and serves
// /dev/lxd/sock where Details say.
func TestRealAgent(t *testing.T) {
	agent, err := agenttest.BuildAgent()
	if err != nil {
		t.Fatal(err)
	}
	certs := agenttest.NewCerts(t)
	b := launch(t, dataDir(t)).Backend()
	ctx := ctxT(t)
	events, err := b.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	spec := &sdk.GuestSpec{
		Name: "agent-e2e", UUID: "6a1e2c3d-0000-4000-8000-0000000000e2",
		Config: map[string]string{simbackend.KeyAgent: agent},
		Files: []sdk.File{
			{Path: "agent.crt", Mode: 0o644, Data: certs.Agent.CertPEM},
			{Path: "agent.key", Mode: 0o600, Data: certs.Agent.KeyPEM},
			{Path: "server.crt", Mode: 0o644, Data: certs.DaemonClient.CertPEM},
		},
	}
	h, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	h, st, err := b.Start(ctx, h, spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	waitEvent(t, events, spec.UUID, sdk.EventRingData)
	waitRingLine(t, b, h, "STARTED")

	ep, err := b.LinkEndpoint(ctx, h)
	if err != nil || ep.Kind != sdk.LinkHybrid {
		t.Fatalf("LinkEndpoint = %+v, %v", ep, err)
	}
	d := agenttest.StartDaemon(t, certs, ep.Path, 4242)
	code, body, err := d.Advertise(ctx)
	if err != nil || code != http.StatusOK {
		t.Fatalf("advertising to the agent over %s: %d %s %v", ep.Path, code, body, err)
	}
	waitRingLine(t, b, h, "CONNECTED")
	sock := st.Details[simbackend.DetailDevlxdSocket]
	waitCond(t, "the agent's /dev/lxd/sock", func() bool {
		fi, err := os.Stat(sock)
		return err == nil && fi.Mode()&os.ModeSocket != 0
	})
	if _, err := b.Stop(ctx, h, sdk.StopOptions{Timeout: 20 * time.Second}); err != nil {
		t.Fatal(err)
	}
	ev := waitEvent(t, events, spec.UUID, sdk.EventExited)
	t.Logf("agent exited: %s", ev.Detail)
	if console, err := os.ReadFile(filepath.Join(st.Details[simbackend.DetailGuestDir], "console.log")); err == nil {
		t.Logf("console:\n%s", console)
	}
}

// waitRingLine reads the ring until a complete line word shows up. The
// 16-byte ring may have dropped the start of older lines; only complete
// lines count.
func waitRingLine(t *testing.T, b sdk.Backend, h sdk.Handle, word string) {
	t.Helper()
	var seen []byte
	found := testwait.Until(time.Minute, func() bool {
		data, err := b.ReadRing(context.Background(), h, 4096)
		if err != nil {
			t.Fatalf("ReadRing: %v", err)
		}
		seen = append(seen, data...)
		for _, line := range bytes.Split(seen, []byte("\n"))[1:] { // skip a possibly truncated first line
			if string(line) == word {
				return true
			}
		}
		return bytes.HasPrefix(seen, []byte(word+"\n"))
	})
	if !found {
		t.Fatalf("no %q line on the ring; read %q", word, seen)
	}
}

func waitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, what, time.Minute, cond)
}
