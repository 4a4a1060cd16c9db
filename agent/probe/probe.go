// Package probe runs the readiness probes of the in-guest agent: an HTTP
// GET, a TCP connect, a command or systemd's own verdict, configured by the
// instance's readiness.probe.* keys (read through devlxd), and turns their
// results into the guest's declarations (Ready, Started, Degraded) with a
// reason and a message. It declares only on a change.
package probe

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Configuration keys (the daemon validates them; Parse re-checks).
const (
	KeyPrefix  = "readiness.probe."
	KeyHTTP    = "readiness.probe.http"
	KeyTCP     = "readiness.probe.tcp"
	KeyExec    = "readiness.probe.exec"
	KeySystemd = "readiness.probe.systemd"
	KeyPeriod  = "readiness.probe.period"
	KeyTimeout = "readiness.probe.timeout"
	KeySuccess = "readiness.probe.success_threshold"
	KeyFailure = "readiness.probe.failure_threshold"
)

// Defaults.
const (
	DefaultPeriod  = 10 * time.Second
	DefaultTimeout = time.Second
)

// States a probe declares (devlxd PATCH /1.0 states).
const (
	StateReady    = "Ready"
	StateStarted  = "Started"
	StateDegraded = "Degraded"
)

// Reasons a probe gives.
const (
	ReasonProbeSucceeded = "ProbeSucceeded"
	ReasonProbeFailed    = "ProbeFailed"
	ReasonSystemRunning  = "SystemRunning"
	ReasonSystemStarting = "SystemStarting"
	ReasonUnitsFailed    = "UnitsFailed"
)

// Declaration is what a probe round concludes.
type Declaration struct {
	State, Reason, Message string
}

// Config is a parsed probe configuration; the zero Config runs no probe.
type Config struct {
	HTTP, TCP, Exec string
	Systemd         bool
	Period, Timeout time.Duration
	Success         int // consecutive successes before Ready
	Failure         int // consecutive failures before not Ready
}

// Enabled reports whether c runs a probe.
func (c Config) Enabled() bool { return c.HTTP != "" || c.TCP != "" || c.Exec != "" || c.Systemd }

// Parse reads a Config from config keys (others are ignored). Only one
// probe runs: systemd, else http, else tcp, else exec.
func Parse(kv map[string]string) (Config, error) {
	c := Config{HTTP: kv[KeyHTTP], TCP: kv[KeyTCP], Exec: kv[KeyExec], Period: DefaultPeriod, Timeout: DefaultTimeout, Success: 1, Failure: 1}
	var err error
	if v := kv[KeySystemd]; v != "" {
		if c.Systemd, err = strconv.ParseBool(v); err != nil {
			return Config{}, fmt.Errorf("%s: %q is not a boolean", KeySystemd, v)
		}
	}
	for key, d := range map[string]*time.Duration{KeyPeriod: &c.Period, KeyTimeout: &c.Timeout} {
		if v := kv[key]; v != "" {
			if *d, err = time.ParseDuration(v); err != nil || *d <= 0 {
				return Config{}, fmt.Errorf("%s: %q is not a positive duration", key, v)
			}
		}
	}
	for key, n := range map[string]*int{KeySuccess: &c.Success, KeyFailure: &c.Failure} {
		if v := kv[key]; v != "" {
			if *n, err = strconv.Atoi(v); err != nil || *n < 1 {
				return Config{}, fmt.Errorf("%s: %q is not a positive integer", key, v)
			}
		}
	}
	return c, nil
}

// Checker runs one probe attempt. Systemctl names the systemctl binary
// ("systemctl" on PATH by default).
type Checker struct {
	Systemctl string
	Client    *http.Client // nil: a client without keep-alives
}

// Check runs one attempt of c's probe and returns its conclusion: for
// http, tcp and exec, Ready on success, else Started with ProbeFailed and
// the error; for systemd, Ready when running, Degraded with the failed
// units when degraded, else Started with the state.
func (k *Checker) Check(ctx context.Context, c Config) (Declaration, bool) {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	switch {
	case c.Systemd:
		return k.systemd(ctx)
	case c.HTTP != "":
		return result(c.HTTP, k.http(ctx, c.HTTP))
	case c.TCP != "":
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", c.TCP)
		if err == nil {
			_ = conn.Close()
		}
		return result("tcp "+c.TCP, err)
	default:
		out, err := exec.CommandContext(ctx, "/bin/sh", "-c", c.Exec).CombinedOutput()
		if err != nil {
			if msg := lastLine(out); msg != "" {
				err = fmt.Errorf("%w: %s", err, msg)
			}
		}
		return result("exec "+c.Exec, err)
	}
}

// result turns an attempt's error into a declaration; ok reports success.
func result(target string, err error) (Declaration, bool) {
	if err != nil {
		return Declaration{StateStarted, ReasonProbeFailed, target + ": " + errText(err)}, false
	}
	return Declaration{StateReady, ReasonProbeSucceeded, target + ": ok"}, true
}

// errText shortens the errors of net/http and net to their cause
// ("connection refused" rather than the whole dial chain).
func errText(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		s := op.Err.Error()
		if i := strings.LastIndex(s, ": "); i >= 0 {
			s = s[i+2:]
		}
		return s
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timed out"
	}
	return err.Error()
}

func (k *Checker) http(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	cl := k.Client
	if cl == nil {
		cl = &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	}
	resp, err := cl.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

func (k *Checker) systemd(ctx context.Context) (Declaration, bool) {
	bin := k.Systemctl
	if bin == "" {
		bin = "systemctl"
	}
	out, err := exec.CommandContext(ctx, bin, "is-system-running").Output()
	state := strings.TrimSpace(string(out))
	switch {
	case state == "running":
		return Declaration{StateReady, ReasonSystemRunning, "systemd: running"}, true
	case state == "degraded":
		units, uerr := exec.CommandContext(ctx, bin, "list-units", "--failed", "--plain", "--no-legend").Output()
		msg := "systemd: degraded"
		if names := firstFields(units); uerr == nil && len(names) > 0 {
			msg = strings.Join(names, ", ")
		}
		return Declaration{StateDegraded, ReasonUnitsFailed, msg}, false
	case state != "":
		return Declaration{StateStarted, ReasonSystemStarting, "systemd: " + state}, false
	}
	return Declaration{StateStarted, ReasonProbeFailed, "systemctl is-system-running: " + errText(err)}, false
}

// firstFields returns the first field of every non-empty line.
func firstFields(b []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 0 {
			out = append(out, f[0])
		}
	}
	return out
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// Runner runs a probe every period and calls Declare when the conclusion
// changes (after the thresholds). Run it again with a new Config to follow
// a change.
type Runner struct {
	Checker Checker
	// Declare sends a declaration; an error is retried at the next round.
	Declare func(ctx context.Context, d Declaration) error
}

// Run probes with c until ctx ends.
func (r *Runner) Run(ctx context.Context, c Config) {
	if !c.Enabled() {
		return
	}
	var last Declaration // last declared
	okRun, failRun := 0, 0
	t := time.NewTicker(c.Period)
	defer t.Stop()
	for {
		d, ok := r.Checker.Check(ctx, c)
		if ctx.Err() != nil {
			return
		}
		if ok {
			okRun, failRun = okRun+1, 0
		} else {
			okRun, failRun = 0, failRun+1
		}
		// Declare when a threshold is reached, or when the failure changes
		// its kind (systemd: starting -> degraded).
		due := (ok && okRun >= c.Success) || (!ok && failRun >= c.Failure)
		if due && d != last {
			if err := r.Declare(ctx, d); err == nil {
				last = d
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
