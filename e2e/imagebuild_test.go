package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/images/imagetest"
	"github.com/guestlink/guestlink/internal/testwait"
)

// dashSession is a logged-in dashboard session of a daemon started with
// --http (the one-time URL of guestlink dashboard --print-url).
type dashSession struct {
	base string
	hc   *http.Client
}

// newDashSession logs in to d's dashboard.
func newDashSession(ctx context.Context, t *testing.T, d *daemonProc) *dashSession {
	t.Helper()
	login := strings.TrimSpace(d.cli(ctx, "dashboard", "--print-url"))
	i := strings.Index(login, "/login")
	if i < 0 {
		t.Fatalf("dashboard --print-url printed %q", login)
	}
	jar, _ := cookiejar.New(nil)
	s := &dashSession{base: login[:i], hc: &http.Client{Jar: jar}}
	if code, body := s.get(ctx, t, strings.TrimPrefix(login, s.base)); code != http.StatusOK {
		t.Fatalf("logging in: %d %s", code, body)
	}
	return s
}

// get fetches path of the dashboard: the status and the body.
func (s *dashSession) get(ctx context.Context, t *testing.T, path string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.base+path, nil)
	resp, err := s.hc.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// buildTree makes a source tree for guestlink image build: the CLI copied
// to bin/guestlink (the CLI builds in the tree it sits in), a build
// script whose --check passes, and a Makefile whose guest-image-debian
// target marks its stages as scripts/guest-image-debian.sh does, waits in
// its bootstrap stage until the test writes a line to the FIFO $HOLD (an
// explicit signal, no guessed time) and then fails when the line is
// "fail", else puts image (an ext image) in bin/images/debian-12.img.
func buildTree(t *testing.T, image []byte) (tree, hold string) {
	t.Helper()
	tree = t.TempDir()
	for _, d := range []string{"bin", "scripts"} {
		if err := os.MkdirAll(filepath.Join(tree, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cli, err := os.ReadFile(filepath.Join(binDir, "guestlink"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"bin/guestlink":                 string(cli),
		"bin/source.img":                string(image),
		"scripts/guest-image-debian.sh": "#!/bin/sh\nexit 0\n",
		"Makefile": "guest-image-debian:\n" +
			"\t@echo 'guestlink-stage: bootstrap and packages (mmdebstrap)'\n" +
			"\t@echo 'I: downloading packages'\n\t@echo 'I: extracting packages'\n" +
			"\t@read word < \"$$HOLD\"; test \"$$word\" != fail || { echo 'E: mmdebstrap failed'; exit 3; }\n" +
			"\t@echo 'guestlink-stage: filesystem (mkfs.ext4)'\n" +
			"\t@mkdir -p bin/images && cp bin/source.img bin/images/debian-12.img\n",
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(tree, name), []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	hold = filepath.Join(tree, "hold")
	if err := syscall.Mkfifo(hold, 0o600); err != nil {
		t.Fatal(err)
	}
	return tree, hold
}

// TestImageBuildShown runs guestlink image build against a real daemon,
// its build a test Makefile (buildTree) held in its bootstrap stage: the
// daemon lists the build (GET /1.0/images/builds) with its stage and the
// stage's output lines, the dashboard's Images page and the section it
// fetches every 2 s show it; released, the build goes on to its import
// and, done, leaves the list, the image stored under its name. A second
// build that fails is listed failed with the CLI's error. One interrupted
// as Ctrl-C does (SIGINT to its process group) is listed failed at once,
// reported by the CLI; one killed (SIGKILL, nothing reported) stays
// running until 30 s of silence, then is failed by the daemon. The CLI's
// output, piped, is the build's own as before (no progress drawn).
func TestImageBuildShown(t *testing.T) {
	t.Parallel()
	d := newDaemon(t, "--http", "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	dash := newDashSession(ctx, t, d)
	tree, hold := buildTree(t, imagetest.Ext(4<<20))

	// build starts the CLI in tree, in a process group of its own (cliPGID),
	// as a shell starts a foreground job; wait returns its stdout, stderr,
	// error.
	var cliPGID int
	build := func() (wait func() (string, string, error)) {
		cmd := exec.CommandContext(ctx, filepath.Join(tree, "bin", "guestlink"), "image", "build", "debian-12")
		cmd.Env = append(cleanEnv(), "GUESTLINK_STATE_DIR="+d.stateDir, "HOLD="+hold)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cliPGID = cmd.Process.Pid
		var err error
		waited := make(chan struct{})
		go func() { err = cmd.Wait(); close(waited) }()
		t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); <-waited })
		return func() (string, string, error) {
			<-waited
			return out.String(), errOut.String(), err
		}
	}
	// release writes word to the held build.
	release := func(word string) {
		f, err := os.OpenFile(hold, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(f, word)
		f.Close()
	}
	builds := func() []api.ImageBuild {
		list, err := d.client.ImageBuilds(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return list
	}

	// started returns the build started last once it is running and in
	// its bootstrap stage (the one the FIFO holds).
	started := func() api.ImageBuild {
		var b api.ImageBuild
		testwait.For(t, "a new build held in its bootstrap stage", opTimeout, func() bool {
			list := builds()
			if len(list) == 0 {
				return false
			}
			b = list[len(list)-1]
			return b.Status == "running" && strings.HasPrefix(b.Stage, "bootstrap")
		})
		return b
	}

	wait := build()
	var b api.ImageBuild
	testwait.For(t, "the build listed in its bootstrap stage with its 2 lines of output", opTimeout, func() bool {
		list := builds()
		if len(list) != 1 {
			return false
		}
		b = list[0]
		return b.Lines == 2
	})
	if b.Name != "debian-12" || b.Status != "running" || b.Stage != "bootstrap and packages (mmdebstrap)" || b.Step != 2 {
		t.Fatalf("the held build %+v: want debian-12 running in step 2 (after the agent package), bootstrap", b)
	}
	for _, path := range []string{"/images", "/images/imports"} {
		code, body := dash.get(ctx, t, path)
		if code != http.StatusOK || !strings.Contains(body, `data-testid="build" data-id="`+b.ID+`"`) ||
			!strings.Contains(body, "[2] bootstrap and packages (mmdebstrap)") || !strings.Contains(body, "2 lines of output") {
			t.Fatalf("GET %s: %d, the build not shown with its stage and lines:\n%s", path, code, body)
		}
	}

	release("go")
	out, errOut, err := wait()
	if err != nil {
		t.Fatalf("guestlink image build: %v\nstderr: %s", err, errOut)
	}
	if !strings.Contains(out, "Image debian-12 built and imported") || !strings.Contains(errOut, "I: extracting packages") ||
		strings.Contains(errOut, "guestlink-stage:") || strings.Contains(errOut, "\r") {
		t.Fatalf("piped output: stdout %q, stderr %q (want the build's lines, no markers, nothing drawn)", out, errOut)
	}
	if list := builds(); len(list) != 0 {
		t.Fatalf("a finished build is still listed: %+v", list)
	}
	if _, err := d.client.Image(ctx, "debian-12"); err != nil {
		t.Fatalf("the built image: %v", err)
	}

	// A build that fails: listed failed, with the CLI's error.
	wait = build()
	testwait.For(t, "the second build listed", opTimeout, func() bool { return len(builds()) == 1 })
	release("fail")
	if _, errOut, err := wait(); err == nil || !strings.Contains(errOut, "E: mmdebstrap failed") {
		t.Fatalf("the failing build: %v, stderr %q", err, errOut)
	}
	list := builds()
	if len(list) != 1 || list[0].Status != "failed" || !strings.Contains(list[0].Error, "building debian-12 (make guest-image-debian)") {
		t.Fatalf("the failed build is listed as %+v", list)
	}
	if _, body := dash.get(ctx, t, "/images/imports"); !strings.Contains(body, `data-status="failed"`) || !strings.Contains(body, "building debian-12 (make guest-image-debian)") {
		t.Fatalf("the dashboard does not show the failure:\n%s", body)
	}

	// byID returns the listed build id.
	byID := func(id string) api.ImageBuild {
		for _, b := range builds() {
			if b.ID == id {
				return b
			}
		}
		t.Fatalf("build %s is no longer listed", id)
		return api.ImageBuild{}
	}
	// Ctrl-C on a terminal (SIGINT to the foreground process group): the
	// CLI reports its failure before it exits.
	wait = build()
	held := started()
	if err := syscall.Kill(-cliPGID, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if _, _, err := wait(); err == nil {
		t.Fatal("the interrupted build exited 0")
	}
	if b := byID(held.ID); b.Status != "failed" || !strings.Contains(b.Error, "building debian-12") {
		t.Fatalf("the interrupted build is listed as %+v", b)
	}

	// Killed (SIGKILL, nothing reported): after 30 s of silence the daemon
	// takes the CLI as gone and shows the build failed.
	wait = build()
	held = started()
	if err := syscall.Kill(-cliPGID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, _, _ = wait()
	if b := byID(held.ID); b.Status != "running" {
		t.Fatalf("the killed build is listed as %+v before its silence", b)
	}
	testwait.For(t, "the killed build failed for its silence", 2*opTimeout, func() bool { return byID(held.ID).Status == "failed" })
	if b := byID(held.ID); !strings.Contains(b.Error, "no report from the client for 30s: it is gone") {
		t.Fatalf("the killed build's error %q", b.Error)
	}
}
