package pluginhost_test

import (
	"context"
	"testing"
	"time"

	"github.com/guestlink/guestlink/plugins/pluginhost"
)

// TestCallWaitsForFirstStart: the daemon serves its API while its plugins
// start, so a backend call made before a plugin's first start must wait for
// it, not fail as unavailable. The plugin sleeps 3 s before its handshake;
// the call is made while Start has not returned and the plugin has no
// process (its health not yet healthy), and must answer once the plugin
// runs. A call whose context ends first returns that context's error.
func TestCallWaitsForFirstStart(t *testing.T) {
	dir, bdir := pluginDir(t, map[string]map[string]any{"slow": {"start_delay": "3s"}})
	h := pluginhost.New(testConfig(dir, bdir))
	t.Cleanup(func() { h.Close() })
	started := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		started <- h.Start(ctx)
	}()
	waitFor(t, "the plugin to be known", func() bool { _, err := h.Backend("slow"); return err == nil })
	be, _ := h.Backend("slow")
	if st := status(h, "slow"); st.Health == pluginhost.HealthHealthy {
		t.Fatalf("the plugin is %s before its 3 s start delay ended: the call would not test the wait", st.Health)
	}
	select {
	case err := <-started:
		t.Fatalf("Start returned (%v) before the plugin's first start", err)
	default:
	}
	short, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := be.Info(short); err == nil {
		t.Fatal("Info with an ended context answered before the plugin started")
	}
	info, err := be.Info(ctxT(t))
	if err != nil {
		t.Fatalf("Info during the plugin's first start: %v, want it to wait and answer", err)
	}
	if info == nil {
		t.Fatal("Info answered nil")
	}
	if err := <-started; err != nil {
		t.Fatalf("Start: %v", err)
	}
}
