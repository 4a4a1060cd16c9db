package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/internal/testproc"
	"github.com/guestlink/guestlink/internal/testwait"
)

// runTree makes a source tree of its own for scripts/run.sh: the real
// script and bin/ (the test binaries, in make build's layout). It returns
// the script's path.
func runTree(t *testing.T) string {
	t.Helper()
	return scriptTree(t, "run.sh")
}

// scriptTree makes a source tree of its own for scripts/NAME: the real
// script and bin/ (the test binaries, in make build's layout). It returns
// the script's path.
func scriptTree(t *testing.T, name string) string {
	t.Helper()
	binaries(t)
	tree := t.TempDir()
	script, err := os.ReadFile(filepath.Join("..", "scripts", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(tree, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "scripts", name), script, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(binDir, filepath.Join(tree, "bin")); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(tree, "scripts", name)
}

// startUntilBanner starts a script (cmd, named name in messages) and reads
// its stdout until a line starting with last, the banner's last line. It
// returns the lines read, the channel of the rest of stdout (closed at its
// end: drain it before cmd.Wait) and the script's stderr.
func startUntilBanner(t *testing.T, cmd *exec.Cmd, name, last string) ([]string, <-chan string, *strings.Builder) {
	t.Helper()
	stderr := new(strings.Builder)
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	testproc.Start(t, cmd)
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var out []string
	for done := false; !done; {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("%s ended before its banner; stdout:\n%s\nstderr:\n%s", name, strings.Join(out, "\n"), stderr.String())
			}
			out = append(out, line)
			done = strings.HasPrefix(line, last)
		case <-ctx.Done():
			t.Fatalf("%s printed no banner; stdout:\n%s\nstderr:\n%s", name, strings.Join(out, "\n"), stderr.String())
		}
	}
	return out, lines, stderr
}

// holdPorts listens on a free loopback port and tries the n-1 after it
// (one another process holds is as taken); it returns the first port.
func holdPorts(t *testing.T, n int) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	first := ln.Addr().(*net.TCPAddr).Port
	for p := first + 1; p < first+n; p++ {
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)); err == nil {
			t.Cleanup(func() { l.Close() })
		}
	}
	return first
}

// runScript returns scripts/run.sh as make run starts it, with stdin and
// stdout not a terminal.
func runScript(script, stateDir string, env ...string) *exec.Cmd {
	cmd := exec.Command(script)
	cmd.Env = append(cleanEnv(), append([]string{"STATE_DIR=" + stateDir}, env...)...)
	return cmd
}

// TestRunRefusesTakenPort: make run with HTTP= given and taken, or with
// the default and the 19 ports after it taken, or an HTTP= that is no
// address, refuses with the HTTP= hint before anything starts (no state
// directory is made).
func TestRunRefusesTakenPort(t *testing.T) {
	t.Parallel()
	script := runTree(t)
	for _, tt := range []struct {
		name  string
		held  int    // ports held from the first
		http  string // HTTP, %d the first port
		pick  string // PICK_PORT
		code  int
		wantf string // stderr, %d the first port
	}{
		{"given and taken", 1, "127.0.0.1:%d", "", 1,
			"make run: 127.0.0.1:%d is taken (something listens there); give a free address: make run HTTP=127.0.0.1:PORT\n"},
		{"default and the next 19 taken", 20, "127.0.0.1:%d", "1", 1,
			"make run: 127.0.0.1:%d and the 19 ports after it are taken; give a free address: make run HTTP=127.0.0.1:PORT\n"},
		{"a port alone", 1, "%d", "", 2,
			"make run: HTTP=%d is not HOST:PORT (e.g. make run HTTP=127.0.0.1:8090)\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			port := holdPorts(t, tt.held)
			stateDir := filepath.Join(t.TempDir(), "state")
			cmd := runScript(script, stateDir, "HTTP="+fmt.Sprintf(tt.http, port), "PICK_PORT="+tt.pick)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != tt.code {
				t.Fatalf("run.sh: %v, want exit %d; stderr %q", err, tt.code, stderr.String())
			}
			if want := fmt.Sprintf(tt.wantf, port); stderr.String() != want {
				t.Fatalf("stderr\n %q, want\n %q", stderr.String(), want)
			}
			if _, err := os.Stat(stateDir); !os.IsNotExist(err) {
				t.Fatalf("a refused make run made its state directory (%v)", err)
			}
		})
	}
}

// TestRunPicksFreePort: with the default port taken, make run takes the
// next free one, says so, prints the dashboard's URL on it and the daemon
// answers there; SIGTERM then stops it (exit 0) with nothing left.
func TestRunPicksFreePort(t *testing.T) {
	t.Parallel()
	script := runTree(t)
	port := holdPorts(t, 1)
	stateDir, err := os.MkdirTemp("", "glrun-") // short: socket paths
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(stateDir) })
	cmd := runScript(script, stateDir, fmt.Sprintf("HTTP=127.0.0.1:%d", port), "PICK_PORT=1")
	out, lines, stderr := startUntilBanner(t, cmd, "run.sh", "Press Ctrl-C")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	text := strings.Join(out, "\n")
	m := regexp.MustCompile(fmt.Sprintf(`make run: 127\.0\.0\.1:%d is taken; the dashboard is on http://127\.0\.0\.1:(\d+)/ instead`, port)).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("run.sh does not say it took another port:\n%s", text)
	}
	picked, _ := strconv.Atoi(m[1])
	if picked <= port || picked > port+19 {
		t.Fatalf("run.sh took port %d, want one of the 19 after %d", picked, port)
	}
	// The banner's dashboard URL (the one-time login URL) is on that port.
	if !regexp.MustCompile(fmt.Sprintf(`dashboard:\s+http://127\.0\.0\.1:%d/`, picked)).MatchString(text) {
		t.Fatalf("the banner's dashboard URL is not on port %d:\n%s", picked, text)
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/1.0", picked))
	if err != nil {
		t.Fatalf("the daemon does not answer on the picked port: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	del := exec.CommandContext(ctx, filepath.Join(binDir, "guestlink"), "delete", "--force", "demo")
	del.Env = append(cleanEnv(), "GUESTLINK_STATE_DIR="+stateDir)
	if b, err := del.CombinedOutput(); err != nil {
		t.Fatalf("deleting the demo guest: %v: %s", err, b)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for range lines { // the rest of stdout, until the script closes it
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("run.sh after SIGTERM: %v; stderr:\n%s", err, stderr.String())
	}
	var left []proc
	testwait.Until(15*time.Second, func() bool { // exiting processes take a moment
		left = procsUnder(stateDir)
		return len(left) == 0
	})
	if len(left) != 0 {
		t.Fatalf("processes of the state directory left after make run stopped: %+v", left)
	}
}
