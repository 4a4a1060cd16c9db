package e2e

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/client"
)

// sayCommand is a sim guest that runs the agent and prints every line a
// test writes to the FIFO "say" in its root: output the guest produces when
// the test decides, through the guest's own stdout into console.log. The
// agent logs to a file of its own, not to the console: its lines come when
// the link does (an advertisement may be validated after the test's last
// line), and the test owns every byte of the console.
//
// The guest holds the FIFO open for reading and writing (`cat <>`), so
// its reader never sees the end of a writer and never closes it. A `cat
// "$f"` run again after each writer lost lines: a writer that opened while
// the old cat, having read its end, had not yet closed the FIFO wrote into
// a pipe whose buffer Linux drops with its last reader (measured: 93 of
// 2,000 back-to-back writes lost; TestOOMCondition missed its OOM line once
// under CI's -race).
const sayCommand = `f="$GUESTLINK_ROOT/say"; [ -p "$f" ] || mkfifo "$f"; echo "guest booting"; "$GUESTLINK_AGENT" run >"$GUESTLINK_ROOT/agent.log" 2>&1 & while :; do cat <>"$f"; done`

// say makes the guest print line.
func (g *guest) say(t *testing.T, line string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(g.root, "say"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("opening the guest's say FIFO: %v", err)
	}
	defer f.Close()
	if _, err := io.WriteString(f, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

// TestConsole reads and follows the console log of a real sim guest through
// the admin API and the CLI.
func TestConsole(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	g := d.launch(ctx, "con1", map[string]string{"sim.command": sayCommand}, nil)

	// Follow first, then make the guest print: the stream carries it.
	fctx, fcancel := context.WithCancel(ctx)
	defer fcancel()
	stream, err := d.client.Console(fctx, "con1", client.ConsoleOptions{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	lines := bufio.NewScanner(stream)
	g.say(t, "printed after the stream opened")
	found := map[string]bool{}
	for !found["printed after the stream opened"] && lines.Scan() {
		found[lines.Text()] = true
	}
	if !found["guest booting"] || !found["printed after the stream opened"] {
		t.Fatalf("follow stream lines %v: want the boot line and the new line (scan error %v)", found, lines.Err())
	}

	for _, tc := range []struct {
		name string
		args []string
		want func(string) bool
	}{
		{"show-log", []string{"console", "con1", "--show-log"}, func(s string) bool {
			return strings.HasPrefix(s, "guest booting\n") && strings.Contains(s, "printed after the stream opened\n")
		}},
		{"tail", []string{"console", "con1", "--tail", "7"}, func(s string) bool { return s == "opened\n" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if out := d.cli(ctx, tc.args...); !tc.want(out) {
				t.Fatalf("guestlink %s printed %q", strings.Join(tc.args, " "), out)
			}
		})
	}

	for _, tc := range []struct {
		name, query string
		code        int
	}{
		{"negative offset", "offset=-1", http.StatusBadRequest},
		{"offset and tail", "offset=1&tail=1", http.StatusBadRequest},
		{"bad follow", "follow=maybe", http.StatusBadRequest},
		{"follow with limit", "follow=true&limit=3", http.StatusBadRequest},
		{"limit", "offset=6&limit=7", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := d.rawGet(ctx, t, "/1.0/instances/con1/console?"+tc.query)
			if code != tc.code {
				t.Fatalf("GET console?%s = %d %s, want %d", tc.query, code, body, tc.code)
			}
			if code == http.StatusOK && body != "booting" {
				t.Fatalf("GET console?%s = %q, want booting", tc.query, body)
			}
		})
	}
	// The CLI follows too: a line printed after it started reaches its
	// stdout; it is interrupted (SIGINT) as a user's Ctrl-C would.
	t.Run("cli follow", func(t *testing.T) {
		cmd := exec.CommandContext(ctx, filepath.Join(binDir, "guestlink"), "console", "con1", "--follow", "--tail", "1")
		cmd.Env = append(cleanEnv(), "GUESTLINK_STATE_DIR="+d.stateDir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = cmd.Process.Signal(os.Interrupt)
			_ = cmd.Wait()
		}()
		sc := bufio.NewScanner(out)
		if !sc.Scan() || sc.Text() != "" { // the last byte of the log: its final newline
			t.Fatalf("first line %q, want the empty rest of the last line (%v)", sc.Text(), sc.Err())
		}
		g.say(t, "printed while the CLI follows")
		if !sc.Scan() || sc.Text() != "printed while the CLI follows" {
			t.Fatalf("guestlink console --follow printed %q (%v)", sc.Text(), sc.Err())
		}
	})

	var se *client.StatusError
	if _, err := d.client.Console(ctx, "nope", client.ConsoleOptions{}); !errors.As(err, &se) || se.Code != http.StatusNotFound {
		t.Fatalf("console of an unknown instance: %v, want 404", err)
	}

	// Deleting the instance ends the follow stream.
	if err := d.client.Delete(ctx, "con1", true); err != nil {
		t.Fatal(err)
	}
	for lines.Scan() {
	}
	if fctx.Err() != nil {
		t.Fatal("the follow stream outlived the test's context instead of ending with the instance")
	}
}

// rawGet sends GET path to the admin socket and returns the status and the
// body as it came.
func (d *daemonProc) rawGet(ctx context.Context, t *testing.T, path string) (int, string) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dialer net.Dialer
		return dialer.DialContext(ctx, "unix", filepath.Join(d.stateDir, "guestlink.sock"))
	}}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://unix"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, string(b)
}
