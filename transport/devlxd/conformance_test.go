package devlxd

import (
	"testing"

	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/internal/devlxdconf"
)

// TestConformance runs the devlxd conformance suite's link form against the
// handlers in process (the daemon e2e test runs both forms with real
// processes).
func TestConformance(t *testing.T) {
	e := newEnv(t, nil)
	e.insts.mu.Lock()
	e.insts.byID[uuidA] = &instance.Instance{Name: "a", UUID: uuidA, Config: devlxdconf.Config(), Devices: devlxdconf.Devices()}
	e.insts.byID[uuidOff] = &instance.Instance{Name: "off", UUID: uuidOff, Config: devlxdconf.DisabledConfig()}
	e.insts.mu.Unlock()
	t.Run("enabled", func(t *testing.T) {
		devlxdconf.Run(t, devlxdconf.Target{Form: devlxdconf.FormLink, Client: e.client(uuidA, e.agents["a"])},
			devlxdconf.Guest{Name: "a", InstanceID: uuidA, Location: "host1", InstanceType: "virtual-machine"})
	})
	t.Run("disabled", func(t *testing.T) {
		devlxdconf.RunDisabled(t, devlxdconf.Target{Form: devlxdconf.FormLink, Client: e.client(uuidOff, e.agents["off"])})
	})
}
