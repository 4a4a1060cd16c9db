// Declaring states on a guest's devlxd socket, as the guest's userland does.

package fleetbackend

import (
	"context"
	"net/http"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/guestlink/guestlink/agent/devlxdclient"
)

// declare sends the state until devlxd takes it (the socket comes up with
// the agent, the daemon may be away), backing off up to 5 s; it reports
// false when ctx ends first.
func declare(ctx context.Context, hc *http.Client, state string) bool {
	bo := &backoff.ExponentialBackOff{InitialInterval: 100 * time.Millisecond, RandomizationFactor: 0.3, Multiplier: 2, MaxInterval: 5 * time.Second}
	for {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := devlxdclient.Declare(actx, hc, state)
		cancel()
		if err == nil {
			return true
		}
		if !sleep(ctx, bo.NextBackOff()) {
			return false
		}
	}
}
