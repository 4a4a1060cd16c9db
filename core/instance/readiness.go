package instance

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/guestlink/guestlink/core/instance/record"
	"github.com/guestlink/guestlink/core/status"
)

// Readiness configuration keys (docs/readiness.md). The daemon acts on
// readiness.timeout; the agent in the guest runs the probes (it reads the
// keys through devlxd).
const (
	KeyReadinessTimeout  = "readiness.timeout"
	KeyProbeHTTP         = "readiness.probe.http"
	KeyProbeTCP          = "readiness.probe.tcp"
	KeyProbeExec         = "readiness.probe.exec"
	KeyProbeSystemd      = "readiness.probe.systemd"
	KeyProbePeriod       = "readiness.probe.period"
	KeyProbeTimeout      = "readiness.probe.timeout"
	KeyProbeSuccessThres = "readiness.probe.success_threshold"
	KeyProbeFailureThres = "readiness.probe.failure_threshold"
	// KeySystemdNotify set to false makes the daemon ignore the READY=1
	// the guest's systemd sends over vsock (docs/guest-link.md): the guest
	// decides Ready through the agent or devlxd alone.
	KeySystemdNotify = "readiness.systemd_notify"
)

// Bounds of the readiness keys.
const (
	maxReadinessTimeout = 24 * time.Hour
	minProbePeriod      = 100 * time.Millisecond
	maxProbePeriod      = time.Hour
	maxProbeThreshold   = 1000
	maxProbeExec        = 4096
)

// readinessKeys are the checkers of the readiness keys.
var readinessKeys = map[string]keyChecker{
	KeyReadinessTimeout:  durationChecker(time.Second, maxReadinessTimeout),
	KeyProbeHTTP:         checkProbeURL,
	KeyProbeTCP:          checkHostPort,
	KeyProbeExec:         checkProbeExec,
	KeyProbeSystemd:      checkBool,
	KeyProbePeriod:       durationChecker(minProbePeriod, maxProbePeriod),
	KeyProbeTimeout:      durationChecker(minProbePeriod, maxProbePeriod),
	KeyProbeSuccessThres: checkThreshold,
	KeyProbeFailureThres: checkThreshold,
	KeySystemdNotify:     checkBool,
}

// SystemdNotifyEnabled reports whether a READY=1 from the guest's systemd
// declares Ready under config (an instance's effective config):
// readiness.systemd_notify is unset or anything but a false value ("false",
// "0", "no", "off", any case), as LXD reads its booleans.
func SystemdNotifyEnabled(config map[string]string) bool {
	switch strings.ToLower(config[KeySystemdNotify]) {
	case "0", "false", "no", "off":
		return false
	}
	return true
}

// durationChecker checks a Go duration between lo and hi.
func durationChecker(lo, hi time.Duration) keyChecker {
	return func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%q is not a duration such as 30s or 2m", v)
		}
		if d < lo || d > hi {
			return fmt.Errorf("%q must be between %s and %s", v, lo, hi)
		}
		return nil
	}
}

func checkProbeURL(v string) error {
	u, err := url.Parse(v)
	if err != nil {
		return fmt.Errorf("%q is not a URL: %v", v, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%q: the scheme must be http or https", v)
	}
	if u.Host == "" {
		return fmt.Errorf("%q has no host", v)
	}
	return nil
}

func checkHostPort(v string) error {
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return fmt.Errorf("%q is not HOST:PORT: %v", v, err)
	}
	if host == "" {
		return fmt.Errorf("%q has no host", v)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q: the port must be a number from 1 to 65535", v)
	}
	return nil
}

func checkProbeExec(v string) error {
	switch {
	case v == "":
		return fmt.Errorf("the command is empty")
	case len(v) > maxProbeExec:
		return fmt.Errorf("the command is longer than %d bytes", maxProbeExec)
	}
	return nil
}

func checkThreshold(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxProbeThreshold {
		return fmt.Errorf("%q is not an integer from 1 to %d", v, maxProbeThreshold)
	}
	return nil
}

// armReadyTimer arms (or disarms) e's readiness.timeout timer for the state
// a change just made current; e.mu must be held. The timer runs while the
// instance runs, has a positive readiness.timeout and has not been Ready
// this boot; it fires at StartedAt + timeout. After a daemon restart (the
// Ready flag is "" until the agent re-declares) it waits for the agent.
func (m *Manager) armReadyTimer(e *entry, rec *record.Instance, rt *runtime) {
	var at time.Time
	d, err := time.ParseDuration(rec.Config[KeyReadinessTimeout])
	if err == nil && d > 0 && rec.PowerState == status.PowerRunning && rec.StartedAt != nil &&
		rec.Config[KeyReady] == "false" && rt.readyAt == nil && !rt.readyTimedOut {
		at = rec.StartedAt.Add(d)
	}
	if at.Equal(e.readyTimerAt) {
		return
	}
	m.stopReadyTimer(e)
	if at.IsZero() {
		return
	}
	e.readyTimerAt = at
	boot := rec.Boot
	e.readyTimer = time.AfterFunc(time.Until(at), func() { m.readyTimeout(e, boot) })
}

// stopReadyTimer stops e's readiness.timeout timer; e.mu must be held.
func (m *Manager) stopReadyTimer(e *entry) {
	if e.readyTimer != nil {
		e.readyTimer.Stop()
	}
	e.readyTimer, e.readyTimerAt = nil, time.Time{}
}

// readyTimeout marks boot of e as not Ready in time (Ready=False,
// reason Timeout, and its instance-condition-changed event), unless it
// became Ready, stopped or was restarted meanwhile.
func (m *Manager) readyTimeout(e *entry, boot int64) {
	ctx, cancel := context.WithTimeout(context.Background(), eventTimeout)
	defer cancel()
	_, err := m.mutate(ctx, e, func(c *change) error {
		if e.readyTimerAt.IsZero() || c.now.Before(e.readyTimerAt) {
			return nil // a timer replaced by a later deadline
		}
		if c.rec.Boot != boot || c.rec.PowerState != status.PowerRunning || c.rec.Config[KeyReady] == "true" || c.rt.readyAt != nil {
			return nil
		}
		c.rt.readyTimedOut = true
		return nil
	})
	if err != nil {
		m.log.Warn("marking an instance not Ready in time", "instance", e.name, "err", err)
	}
}
