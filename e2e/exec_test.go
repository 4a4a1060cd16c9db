package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/creack/pty"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
)

// TestExecSim runs commands in a sim guest through the real daemon, CLI and
// agent: separate streams and the exit code, a PTY whose size the command
// sees, the clean environment and the guest's root as working directory,
// and the refusals (bad input 400, unknown instance 404, no connected agent
// 409, a devlxd token 401), each exec audited in the daemon's log.
func TestExecSim(t *testing.T) {
	t.Parallel()
	d := newTCPDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	g := d.launch(ctx, "exec1", nil, nil)

	t.Run("streams and exit code", func(t *testing.T) { checkExecStreams(ctx, t, d.daemonProc, "exec1") })

	t.Run("clean environment, cwd and env", func(t *testing.T) {
		out := d.cli(ctx, "exec", "exec1", "--env", "FOO=bar baz", "--", "sh", "-c", `pwd; env`)
		lines := strings.Split(out, "\n")
		if lines[0] != g.root {
			t.Errorf("working directory %q, want the guest's root %q", lines[0], g.root)
		}
		if !strings.Contains(out, "\nFOO=bar baz\n") {
			t.Errorf("--env FOO did not reach the command:\n%s", out)
		}
		// The agent runs with GUESTLINK_AGENT_* and the CLI with
		// GUESTLINK_STATE_DIR: none of it may reach the command.
		if strings.Contains(out, "GUESTLINK_") {
			t.Errorf("the agent's or the CLI's environment reached the command:\n%s", out)
		}
		if out := d.cli(ctx, "exec", "exec1", "--cwd", "/dev", "--", "pwd"); out != filepath.Join(g.root, "dev")+"\n" {
			t.Errorf("--cwd /dev: pwd = %q, want %q", out, filepath.Join(g.root, "dev"))
		}
	})

	t.Run("interactive through a pseudo-terminal", func(t *testing.T) { checkExecPTY(ctx, t, d.daemonProc, "exec1") })

	t.Run("refused input", func(t *testing.T) {
		for _, tc := range []struct {
			name, inst string
			req        api.ExecPost
			code       int
			want       string
		}{
			{"empty command", "exec1", api.ExecPost{}, http.StatusBadRequest, "command is empty"},
			{"bad env key", "exec1", api.ExecPost{Command: []string{"true"}, Environment: map[string]string{"1A": "x"}}, http.StatusBadRequest, `environment variable name "1A" is invalid`},
			{"relative cwd", "exec1", api.ExecPost{Command: []string{"true"}, Cwd: "tmp"}, http.StatusBadRequest, `cwd "tmp" is not an absolute path`},
			{"missing cwd", "exec1", api.ExecPost{Command: []string{"true"}, Cwd: "/no/such/dir"}, http.StatusBadRequest, `cwd "/no/such/dir" is not a directory`},
			{"unknown program", "exec1", api.ExecPost{Command: []string{"no-such-program-xyz"}}, http.StatusBadRequest, `command "no-such-program-xyz" not found`},
			{"unknown instance", "nosuch", api.ExecPost{Command: []string{"true"}}, http.StatusNotFound, "nosuch"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := d.client.Exec(ctx, tc.inst, tc.req, client.ExecIO{})
				var se *client.StatusError
				if !errors.As(err, &se) || se.Code != tc.code || !strings.Contains(se.Message, tc.want) {
					t.Fatalf("exec %+v: %v, want %d containing %q", tc.req, err, tc.code, tc.want)
				}
			})
		}
	})

	t.Run("no connected agent", func(t *testing.T) {
		// Stopped, and running a guest command that starts no agent.
		if _, err := d.client.Create(ctx, api.InstancesPost{Name: "stopped1", Backend: "sim"}); err != nil {
			t.Fatal(err)
		}
		if _, err := d.client.Create(ctx, api.InstancesPost{Name: "noagent1", Backend: "sim", Start: true,
			Config: map[string]string{"sim.command": "exec sleep 600"}}); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"stopped1", "noagent1"} {
			_, err := d.client.Exec(ctx, name, api.ExecPost{Command: []string{"true"}}, client.ExecIO{})
			var se *client.StatusError
			if !errors.As(err, &se) || se.Code != http.StatusConflict {
				t.Fatalf("exec in %s: %v, want 409", name, err)
			}
		}
	})

	t.Run("identities", func(t *testing.T) {
		if _, err := d.client.CreateDevlxdIdentity(ctx, "csi", []string{"exec1"}); err != nil {
			t.Fatal(err)
		}
		devlxdTok, err := d.client.IssueDevlxdToken(ctx, "csi", "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.client.CreateBearerIdentity(ctx, "execadmin"); err != nil {
			t.Fatal(err)
		}
		adminTok, err := d.client.IssueToken(ctx, "execadmin", "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.client.CreateBearerIdentityWith(ctx, api.IdentitiesBearerPost{Name: "execviewer", Role: api.RoleViewer}); err != nil {
			t.Fatal(err)
		}
		viewerTok, err := d.client.IssueToken(ctx, "execviewer", "")
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name, token string
			code        int // 0: the exec runs
		}{
			{"devlxd token", devlxdTok.Token, http.StatusUnauthorized},
			{"no credentials", "", http.StatusUnauthorized},
			{"viewer bearer token", viewerTok.Token, http.StatusForbidden},
			{"admin bearer token", adminTok.Token, 0},
		} {
			t.Run(tc.name, func(t *testing.T) {
				c, err := client.NewWithOptions(d.httpURL, client.Options{Token: tc.token})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				var out bytes.Buffer
				code, err := c.Exec(ctx, "exec1", api.ExecPost{Command: []string{"echo", "hi"}}, client.ExecIO{Stdout: &out})
				if tc.code == 0 {
					if err != nil || code != 0 || out.String() != "hi\n" {
						t.Fatalf("exec: %d %v %q, want 0 and hi", code, err, out.String())
					}
					return
				}
				var se *client.StatusError
				if !errors.As(err, &se) || se.Code != tc.code {
					t.Fatalf("exec with %s: %v, want %d", tc.name, err, tc.code)
				}
			})
		}
	})

	t.Run("operations are their owner's", func(t *testing.T) {
		// An exec started by execadmin (without websockets: it runs at
		// once) is found by execadmin, and is 404 for the admin socket's
		// identity, which did not start it.
		adminTok, err := d.client.IssueToken(ctx, "execadmin", "")
		if err != nil {
			t.Fatal(err)
		}
		call := func(method, path, body string) (int, api.Response[api.Operation]) {
			req, err := http.NewRequestWithContext(ctx, method, d.httpURL+path, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+adminTok.Token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var env api.Response[api.Operation]
			if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
				t.Fatal(err)
			}
			return resp.StatusCode, env
		}
		code, env := call(http.MethodPost, "/1.0/instances/exec1/exec", `{"command":["sh","-c","exit 3"],"wait-for-websocket":false}`)
		if code != http.StatusAccepted || env.Type != api.TypeAsync || env.Operation != "/1.0/operations/"+env.Metadata.ID {
			t.Fatalf("POST exec: %d %+v, want 202 async", code, env)
		}
		code, done := call(http.MethodGet, env.Operation+"/wait?timeout=30", "")
		if code != http.StatusOK || done.Metadata.Metadata.Return == nil || *done.Metadata.Metadata.Return != 3 {
			t.Fatalf("wait: %d %+v, want return 3", code, done)
		}
		var se *client.StatusError
		op, err := d.client.Operation(ctx, env.Metadata.ID)
		if !errors.As(err, &se) || se.Code != http.StatusNotFound {
			t.Fatalf("another identity's GET %s: %+v %v, want 404", env.Operation, op, err)
		}
	})

	t.Run("serial_link", func(t *testing.T) {
		d.launch(ctx, "execserial", map[string]string{"sim.link": "serial"}, nil)
		checkExecStreams(ctx, t, d.daemonProc, "execserial")
		checkExecPTY(ctx, t, d.daemonProc, "execserial")
	})

	t.Run("audit", func(t *testing.T) {
		log := d.log()
		for _, want := range []string{`msg="exec ended"`, `instance=exec1`, `exit_code=7`, `identity="unix `, `identity=bearer/execadmin`} {
			if !strings.Contains(log, want) {
				t.Errorf("daemon log lacks %s", want)
			}
		}
	})
}

// checkExecStreams runs `guestlink exec NAME -- sh -c 'echo out; echo err
// >&2; exit 7'`: each stream on its own fd, and the exit code 7.
func checkExecStreams(ctx context.Context, t *testing.T, d *daemonProc, name string) {
	t.Helper()
	out, errOut, err := d.runCLI(ctx, "exec", name, "--", "sh", "-c", "echo out; echo err >&2; exit 7")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Fatalf("guestlink exec %s: %v (stderr %q), want exit status 7", name, err, errOut)
	}
	if out != "out\n" || errOut != "err\n" {
		t.Fatalf("guestlink exec %s: stdout %q, stderr %q: want %q and %q", name, out, errOut, "out\n", "err\n")
	}
}

// checkExecPTY runs guestlink exec on a pseudo-terminal of 33 rows and
// 111 columns that the test holds: the command runs on a terminal in the
// guest and `stty size` there sees that size; the exit code comes back.
func checkExecPTY(ctx context.Context, t *testing.T, d *daemonProc, name string) {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 33, Cols: 111}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "guestlink"), "exec", name, "--", "sh", "-c", "stty size; tty; exit 5")
	cmd.Env = append(cleanEnv(), "GUESTLINK_STATE_DIR="+d.stateDir)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	// The pseudo-terminal ends (EIO) once guestlink has exited.
	var got bytes.Buffer
	_, _ = io.Copy(&got, ptmx)
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 5 {
		t.Fatalf("guestlink exec %s on a terminal: %v, want exit status 5; output %q", name, err, got.String())
	}
	if !strings.Contains(got.String(), "33 111") {
		t.Errorf("stty size in %s: %q, want 33 111 (the terminal's size)", name, got.String())
	}
	if !strings.Contains(got.String(), "/dev/pts/") {
		t.Errorf("the command in %s did not run on a pseudo-terminal: %q", name, got.String())
	}
}
