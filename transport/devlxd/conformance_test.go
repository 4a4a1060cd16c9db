package devlxd

import (
	"testing"

	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/internal/devlxdconf"
)

// TestConformance runs the devlxd conformance suite's link form against the
// handlers in process, for a VM guest (a) and a container guest (b) (the
// daemon e2e test runs both forms with real processes, for sim guests).
func TestConformance(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.InstanceTypes = switchTypes{} })
	e.insts.mu.Lock()
	e.insts.byID[uuidA] = &instance.Instance{Name: "a", UUID: uuidA, Config: devlxdconf.Config(), Devices: devlxdconf.Devices()}
	e.insts.byID[uuidB] = &instance.Instance{Name: "b", UUID: uuidB, Backend: "ct", Config: devlxdconf.Config(), Devices: devlxdconf.Devices()}
	e.insts.byID[uuidOff] = &instance.Instance{Name: "off", UUID: uuidOff, Backend: "ct", Config: devlxdconf.DisabledConfig()}
	e.insts.mu.Unlock()
	t.Run("virtual-machine", func(t *testing.T) {
		devlxdconf.Run(t, devlxdconf.Target{Form: devlxdconf.FormLink, Client: e.client(uuidA, e.agents["a"])},
			devlxdconf.Guest{Name: "a", InstanceID: uuidA, Location: "host1", InstanceType: devlxdconf.InstanceTypeVM})
	})
	t.Run("container", func(t *testing.T) {
		devlxdconf.Run(t, devlxdconf.Target{Form: devlxdconf.FormLink, Client: e.client(uuidB, e.agents["b"])},
			devlxdconf.Guest{Name: "b", InstanceID: uuidB, Location: "host1", InstanceType: "container"})
	})
	t.Run("disabled", func(t *testing.T) {
		devlxdconf.RunDisabled(t, devlxdconf.Target{Form: devlxdconf.FormLink, Client: e.client(uuidOff, e.agents["off"])})
	})
}
