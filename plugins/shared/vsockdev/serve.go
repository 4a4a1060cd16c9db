package vsockdev

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/guestlink/guestlink/plugins/shared/vhostuser"
)

// Run serves the device until ctx ends: host clients on hostLn (the
// "<uds>" socket) and vhost-user front-ends on vhostLn, one session at a
// time (a QEMU that reconnects gets a fresh session; the guest's
// connections of the old one are gone). Session errors go to logf (nil
// discards them); they never end Run. Run closes both listeners.
func (d *Device) Run(ctx context.Context, vhostLn, hostLn net.Listener, logf func(format string, args ...any)) error {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := d.ServeHost(hostLn); err != nil {
			logf("vsock host socket: %v", err)
		}
	}()
	stop := context.AfterFunc(ctx, func() {
		vhostLn.Close()
		hostLn.Close()
	})
	defer stop()
	defer wg.Wait()
	var cur net.Conn
	var mu sync.Mutex
	context.AfterFunc(ctx, func() {
		mu.Lock()
		if cur != nil {
			cur.Close()
		}
		mu.Unlock()
	})
	for {
		c, err := vhostLn.Accept()
		if err != nil {
			hostLn.Close()
			if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accepting on the vhost-user socket: %w", err)
		}
		uc, ok := c.(*net.UnixConn)
		if !ok {
			c.Close()
			continue
		}
		mu.Lock()
		cur = uc
		mu.Unlock()
		if err := vhostuser.NewSession(uc, d).Serve(); err != nil && ctx.Err() == nil {
			logf("vhost-user session: %v", err)
		}
	}
}
