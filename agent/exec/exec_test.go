package exec_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/guestlink/guestlink/agent/exec"
	"github.com/guestlink/guestlink/api"
)

// server serves an exec.Server on root over a real HTTP listener.
func server(t *testing.T, root string) (*exec.Server, *httptest.Server) {
	t.Helper()
	s := &exec.Server{Root: root}
	ts := httptest.NewServer(s)
	t.Cleanup(func() {
		ts.Close()
		s.Wait()
	})
	return s, ts
}

// post sends POST /1.0/exec and returns the status and the raw envelope.
func post(t *testing.T, ts *httptest.Server, req any) (int, api.Response[api.Operation]) {
	t.Helper()
	b, _ := json.Marshal(req)
	resp, err := http.Post(ts.URL+"/1.0/exec", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var env api.Response[api.Operation]
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatalf("decoding %s: %v", raw, err)
	}
	return resp.StatusCode, env
}

func dial(t *testing.T, ts *httptest.Server, op api.Operation, fd string) *websocket.Conn {
	t.Helper()
	u := "ws" + strings.TrimPrefix(ts.URL, "http") + "/1.0/operations/" + op.ID + "/websocket?secret=" + op.Metadata.FDs[fd]
	c, _, err := websocket.DefaultDialer.Dial(u, nil)
	if err != nil {
		t.Fatalf("dialing fd %s: %v", fd, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// readAll reads binary messages until the end of the stream.
func readAll(c *websocket.Conn) string {
	var b strings.Builder
	for {
		mt, data, err := c.ReadMessage()
		if err != nil || mt == websocket.TextMessage {
			return b.String()
		}
		b.Write(data)
	}
}

func wait(t *testing.T, ts *httptest.Server, id string) api.Operation {
	t.Helper()
	resp, err := http.Get(ts.URL + "/1.0/operations/" + id + "/wait")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var env api.Response[api.Operation]
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		t.Fatal(err)
	}
	return env.Metadata
}

// TestExecStreams runs a non-interactive command: stdin reaches it, stdout
// and stderr come on their own websockets, the exit code is the return,
// the environment is only what the request gave plus the defaults, and the
// working directory is the guest's root.
func TestExecStreams(t *testing.T) {
	root := t.TempDir()
	t.Setenv("GUESTLINK_AGENT_SECRET_TEST", "leaked")
	_, ts := server(t, root)
	code, env := post(t, ts, api.ExecPost{
		Command:     []string{"sh", "-c", `read line; echo "out:$line"; echo err >&2; env | sort; pwd; exit 7`},
		Environment: map[string]string{"FOO": "bar"},
		WaitForWS:   true,
	})
	if code != http.StatusAccepted || env.Type != api.TypeAsync {
		t.Fatalf("POST /1.0/exec: %d %+v", code, env)
	}
	op := env.Metadata
	for _, fd := range []string{"0", "1", "2", "control"} {
		if op.Metadata.FDs[fd] == "" {
			t.Fatalf("no secret for fd %s: %+v", fd, op.Metadata)
		}
	}
	ctl := dial(t, ts, op, api.ExecFDControl)
	stdin := dial(t, ts, op, api.ExecFDStdin)
	stdout := dial(t, ts, op, api.ExecFDStdout)
	stderr := dial(t, ts, op, api.ExecFDStderr)
	if err := stdin.WriteMessage(websocket.BinaryMessage, []byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	_ = stdin.WriteMessage(websocket.TextMessage, nil)
	errc := make(chan string, 1)
	go func() { errc <- readAll(stderr) }()
	out := readAll(stdout)
	if got := <-errc; got != "err\n" {
		t.Errorf("stderr = %q, want %q", got, "err\n")
	}
	if !strings.HasPrefix(out, "out:hello\n") {
		t.Errorf("stdout does not start with the echoed stdin: %q", out)
	}
	if strings.Contains(out, "GUESTLINK_AGENT_SECRET_TEST") {
		t.Errorf("the agent's environment reached the command:\n%s", out)
	}
	for _, want := range []string{"FOO=bar\n", "PATH=" + exec.DefaultPath + "\n", "HOME=" + root + "\n", root + "\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	done := wait(t, ts, op.ID)
	ctl.Close()
	if done.Status != api.OperationSuccess || done.Metadata.Return == nil || *done.Metadata.Return != 7 {
		t.Fatalf("operation = %+v, want Success with return 7", done)
	}
	if done.Metadata.FDs != nil {
		t.Errorf("a finished operation still shows its secrets: %v", done.Metadata.FDs)
	}
}

// TestExecPTY runs `stty size` on a terminal of 100x30, then resizes it
// to 120x40 by a control message: the size is applied by another goroutine
// than the terminal's input, so the test asks again (one line, one answer)
// until the new size shows.
func TestExecPTY(t *testing.T) {
	_, ts := server(t, t.TempDir())
	_, env := post(t, ts, api.ExecPost{
		Command:     []string{"sh", "-c", `stty size; while read x; do stty size; done; exit 3`},
		WaitForWS:   true,
		Interactive: true,
		Width:       100,
		Height:      30,
	})
	op := env.Metadata
	if len(op.Metadata.FDs) != 2 {
		t.Fatalf("interactive fds = %v, want 0 and control", op.Metadata.FDs)
	}
	ctl := dial(t, ts, op, api.ExecFDControl)
	term := dial(t, ts, op, api.ExecFDStdin)
	var got strings.Builder
	answers := func() int { return strings.Count(got.String(), "30 100") + strings.Count(got.String(), "40 120") }
	readAnswer := func(n int) {
		for answers() < n {
			_, data, err := term.ReadMessage()
			if err != nil {
				t.Fatalf("terminal ended early: %v (read %q)", err, got.String())
			}
			got.Write(data)
		}
	}
	readAnswer(1)
	if !strings.Contains(got.String(), "30 100") {
		t.Fatalf("first stty size: %q, want 30 100", got.String())
	}
	resize, _ := json.Marshal(api.ExecControl{Command: api.ExecControlResize, Args: map[string]string{"width": "120", "height": "40"}})
	if err := ctl.WriteMessage(websocket.TextMessage, resize); err != nil {
		t.Fatal(err)
	}
	for n := 2; !strings.Contains(got.String(), "40 120"); n++ {
		if n > 200 {
			t.Fatalf("the resize never showed: %q", got.String())
		}
		if err := term.WriteMessage(websocket.BinaryMessage, []byte("\n")); err != nil {
			t.Fatal(err)
		}
		readAnswer(n)
	}
	// Ctrl-D ends the loop (end of input on the terminal).
	if err := term.WriteMessage(websocket.BinaryMessage, []byte{4}); err != nil {
		t.Fatal(err)
	}
	done := wait(t, ts, op.ID)
	ctl.Close()
	if done.Metadata.Return == nil || *done.Metadata.Return != 3 {
		t.Fatalf("operation = %+v, want return 3", done)
	}
}

// TestExecRefused checks the precise 400s of bad requests.
func TestExecRefused(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, ts := server(t, root)
	for _, tc := range []struct {
		name string
		req  any
		want string
	}{
		{"empty command", api.ExecPost{}, "command is empty"},
		{"empty program", api.ExecPost{Command: []string{""}}, "command is empty"},
		{"bad env key", api.ExecPost{Command: []string{"true"}, Environment: map[string]string{"A=B": "x"}}, `environment variable name "A=B" is invalid`},
		{"relative cwd", api.ExecPost{Command: []string{"true"}, Cwd: "tmp"}, `cwd "tmp" is not an absolute path`},
		{"cwd not a dir", api.ExecPost{Command: []string{"true"}, Cwd: "/file"}, `cwd "/file" is not a directory`},
		{"unknown program", api.ExecPost{Command: []string{"no-such-program-xyz"}}, `command "no-such-program-xyz" not found in PATH`},
		{"huge terminal", api.ExecPost{Command: []string{"true"}, Width: 1 << 20}, "terminal size"},
		{"not JSON", "{", "Invalid request body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, env := post(t, ts, tc.req)
			if code != http.StatusBadRequest || !strings.Contains(env.Error, tc.want) {
				t.Fatalf("got %d %q, want 400 containing %q", code, env.Error, tc.want)
			}
		})
	}
	t.Run("wrong secret", func(t *testing.T) {
		_, env := post(t, ts, api.ExecPost{Command: []string{"true"}, WaitForWS: true})
		resp, err := http.Get(ts.URL + "/1.0/operations/" + env.Metadata.ID + "/websocket?secret=nope")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("wrong secret: %d, want 403", resp.StatusCode)
		}
		// Connect the real ones so the operation runs to its end.
		op := env.Metadata
		for _, fd := range []string{"control", "0", "1", "2"} {
			dial(t, ts, op, fd)
		}
		if done := wait(t, ts, op.ID); done.Metadata.Return == nil || *done.Metadata.Return != 0 {
			t.Fatalf("operation = %+v", done)
		}
	})
}

// TestExecControl: a signal message reaches the command (SIGTERM to a
// shell waiting on sleep: return 143), and a control socket that closes
// before the command ends kills it (the client is gone: return 137).
func TestExecControl(t *testing.T) {
	_, ts := server(t, t.TempDir())
	start := func() (api.Operation, *websocket.Conn, *websocket.Conn) {
		_, env := post(t, ts, api.ExecPost{Command: []string{"sh", "-c", "echo up; exec sleep 600"}, WaitForWS: true})
		op := env.Metadata
		ctl := dial(t, ts, op, api.ExecFDControl)
		dial(t, ts, op, api.ExecFDStdin)
		out := dial(t, ts, op, api.ExecFDStdout)
		dial(t, ts, op, api.ExecFDStderr)
		// The command runs once its output comes.
		if _, data, err := out.ReadMessage(); err != nil || string(data) != "up\n" {
			t.Fatalf("first output: %q %v", data, err)
		}
		return op, ctl, out
	}
	t.Run("signal", func(t *testing.T) {
		op, ctl, _ := start()
		msg, _ := json.Marshal(api.ExecControl{Command: api.ExecControlSignal, Signal: 15})
		if err := ctl.WriteMessage(websocket.TextMessage, msg); err != nil {
			t.Fatal(err)
		}
		if done := wait(t, ts, op.ID); done.Metadata.Return == nil || *done.Metadata.Return != 128+15 {
			t.Fatalf("after SIGTERM: %+v, want return 143", done)
		}
	})
	t.Run("control closed", func(t *testing.T) {
		op, ctl, _ := start()
		ctl.Close()
		if done := wait(t, ts, op.ID); done.Metadata.Return == nil || *done.Metadata.Return != 128+9 {
			t.Fatalf("after the control socket closed: %+v, want return 137", done)
		}
	})
}
