package pluginhost_test

import (
	"context"
	"testing"

	"github.com/guestlink/guestlink/plugins/pluginhost"
)

// TestCallWaitsForFirstStart: the daemon serves its API while its plugins
// start (Launch, then WaitStarted), so once Launch returned the backend is
// known and a call to it made before the plugin's first start must wait
// for it, not fail as unavailable or unknown, and List says the plugin is
// starting (not restarting: it never ran). The plugin sleeps 3 s before
// its handshake, and the call is made while it has no process (its health
// not yet healthy); it must answer once the plugin runs. A call whose
// context already ended returns an error instead of waiting.
func TestCallWaitsForFirstStart(t *testing.T) {
	dir, bdir := pluginDir(t, map[string]map[string]any{"slow": {"start_delay": "3s"}})
	h := pluginhost.New(testConfig(dir, bdir))
	t.Cleanup(func() { h.Close() })
	if err := h.Launch(); err != nil {
		t.Fatalf("Launch: %v", err)
	}
	be, err := h.Backend("slow")
	if err != nil {
		t.Fatalf("Backend after Launch: %v", err)
	}
	// Before its first start the plugin is "starting", not "restarting"
	// (it was "restarting" before: it had never run nor failed).
	if st := status(h, "slow"); st.Health != pluginhost.HealthStarting || st.Restarts != 0 || st.Failures != 0 || st.LastError != "" {
		t.Fatalf("before its 3 s start delay ended the plugin is %s (restarts %d, failures %d, last error %q), want starting with no restart, failure or error",
			st.Health, st.Restarts, st.Failures, st.LastError)
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := be.Info(ended); err == nil {
		t.Fatal("Info with an ended context answered before the plugin started")
	}
	info, err := be.Info(ctxT(t))
	if err != nil || info == nil {
		t.Fatalf("Info during the plugin's first start = %v, %v; want it to wait and answer", info, err)
	}
	if err := h.WaitStarted(ctxT(t)); err != nil {
		t.Fatalf("WaitStarted: %v", err)
	}
	if st := status(h, "slow"); st.Health != pluginhost.HealthHealthy {
		t.Fatalf("after WaitStarted the plugin is %s, want healthy", st.Health)
	}
}
