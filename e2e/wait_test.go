package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
)

// readyCommand is a sim guest that runs the agent and declares itself
// Ready, with a reason, once the host answers on /dev/lxd/sock.
const readyCommand = `"$GUESTLINK_AGENT" run & "$GUESTLINK_AGENT" wait-host --timeout 60s && "$GUESTLINK_AGENT" ready --reason Booted --message "guest script done"; wait`

// exitOf returns the exit code of a CLI run (0 without error).
func exitOf(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("running the CLI: %v", err)
	}
	return ee.ExitCode()
}

// TestWaitCLI runs the Done-when of issue 12: launch --wait ready returns
// once the guest declares Ready (exit 0), and with a guest that never
// declares it, the timeout exit code with the conditions printed; then the
// other exit codes of guestlink wait.
func TestWaitCLI(t *testing.T) {
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	tests := []struct {
		name   string
		args   []string
		code   int
		stdout []string // substrings of stdout
		stderr []string // substrings of stderr
	}{
		{"launch waits for ready",
			[]string{"launch", "web1", "--backend", "sim", "-c", "sim.command=" + readyCommand, "--wait", "ready", "--timeout", "30s"},
			0, []string{"Instance web1 launched on sim", "web1: ready met (Ready)"}, nil},
		{"launch times out",
			[]string{"launch", "web2", "--backend", "sim", "--wait", "ready", "--timeout", "3s"},
			2, []string{"web2: ready timeout (Running)", "CONDITION", "Ready", "False", "NotDeclared", "AgentConnected"},
			[]string{"Error: instance web2 is not ready after 3s"}},
		{"wait for the agent", []string{"wait", "web2", "--for", "agent-connected", "--timeout", "60s"}, 0, []string{"web2: agent-connected met"}, nil},
		{"wait for two", []string{"wait", "web1", "web2", "--for", "running", "--timeout", "30s"}, 0, []string{"web1: running met", "web2: running met"}, nil},
		{"not found", []string{"wait", "nope", "--timeout", "5s"}, 4, nil, []string{"not found"}},
		{"bad condition", []string{"wait", "web1", "--for", "happy"}, 1, nil, []string{`invalid --for "happy": must be one of ready, agent-connected, running, stopped`}},
		{"bad wait", []string{"start", "web1", "--wait", "soon"}, 1, nil, []string{`invalid --wait "soon"`}},
		{"stop, then wait for stopped", []string{"stop", "web2"}, 0, nil, nil},
		{"stopped instance", []string{"wait", "web2", "--for", "ready", "--timeout", "30s"}, 3, []string{"web2: ready stopped (Stopped)"}, []string{"cannot become ready"}},
		{"start waits", []string{"start", "web2", "--wait", "agent-connected", "--timeout", "60s"}, 0, []string{"web2: agent-connected met"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, err := d.runCLI(ctx, tt.args...)
			if code := exitOf(t, err); code != tt.code {
				t.Fatalf("exit code %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, out, errOut)
			}
			for _, s := range tt.stdout {
				if !strings.Contains(out, s) {
					t.Errorf("stdout lacks %q:\n%s", s, out)
				}
			}
			for _, s := range tt.stderr {
				if !strings.Contains(errOut, s) {
					t.Errorf("stderr lacks %q:\n%s", s, errOut)
				}
			}
			if strings.Contains(errOut, "Waiting for") {
				t.Errorf("progress shown on a pipe: %q", errOut)
			}
		})
	}

	// The guest's reason shows in the conditions of info --format json.
	var inst api.Instance
	if err := json.Unmarshal([]byte(d.cli(ctx, "info", "web1", "--format", "json")), &inst); err != nil {
		t.Fatal(err)
	}
	conds := map[string]api.Condition{}
	for _, c := range inst.Conditions {
		conds[c.Type] = c
	}
	if c := conds[api.ConditionReady]; c.Status != api.ConditionTrue || c.Reason != "Booted" || c.Message != "guest script done" {
		t.Errorf("Ready condition %+v", c)
	}
	if c := conds[api.ConditionAgentConnected]; c.Status != api.ConditionTrue {
		t.Errorf("AgentConnected condition %+v", c)
	}
	if out := d.cli(ctx, "info", "web1"); !strings.Contains(out, "Conditions:") || !strings.Contains(out, "Booted") {
		t.Errorf("info lacks the conditions:\n%s", out)
	}
}

// TestDegraded declares a guest Degraded with the agent's command: status
// stays Running (LXD's code), Ready is withdrawn and Degraded=True carries
// the reason; the event carries the conditions.
func TestDegraded(t *testing.T) {
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	g := d.launch(ctx, "web1", nil, nil)
	agentCommand(ctx, t, g, "ready")
	agentCommand(ctx, t, g, "degraded", "--reason", "UnitsFailed", "--message", "nginx.service")
	inst, err := d.client.Instance(ctx, "web1")
	if err != nil {
		t.Fatal(err)
	}
	if inst.Status != "Running" || inst.StatusCode != 103 {
		t.Fatalf("status %s %d", inst.Status, inst.StatusCode)
	}
	want := map[string][3]string{
		api.ConditionReady:    {api.ConditionFalse, "UnitsFailed", "nginx.service"},
		api.ConditionDegraded: {api.ConditionTrue, "UnitsFailed", "nginx.service"},
	}
	for _, c := range inst.Conditions {
		if w, ok := want[c.Type]; ok && (c.Status != w[0] || c.Reason != w[1] || c.Message != w[2]) {
			t.Errorf("%s = %+v, want %v", c.Type, c, w)
		}
	}
	// GET /1.0 in the guest still says Started, as LXD would.
	a := curlDevlxd(ctx, t, g.socket, "GET", "/1.0", "")
	if !strings.Contains(string(a.body), `"state":"Started"`) {
		t.Errorf("GET /1.0: %s", a.body)
	}
	// A bad reason is a precise 400.
	a = curlDevlxd(ctx, t, g.socket, "PATCH", "/1.0", `{"state":"Degraded","reason":"not a word"}`)
	if a.status != 400 || !strings.Contains(string(a.body), "must be a CamelCase word") {
		t.Errorf("bad reason: %d %s", a.status, a.body)
	}
}
