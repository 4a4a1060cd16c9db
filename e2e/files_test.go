package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/internal/testenv"
	"github.com/guestlink/guestlink/internal/testwait"
)

// writeRandom writes size pseudo-random bytes to path and returns their
// sha256.
func writeRandom(t *testing.T, path string, size int64) [32]byte {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	rng := rand.NewChaCha8([32]byte{26})
	if _, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(rng, size)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return [32]byte(h.Sum(nil))
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return [32]byte(h.Sum(nil))
}

// procKB reads a "Key: N kB" line of /proc/PID/status.
func procKB(t *testing.T, pid int, key string) int64 {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("/proc/%d/status %s: %q", pid, key, v)
			}
			return n
		}
	}
	t.Fatalf("/proc/%d/status has no %s", pid, key)
	return 0
}

// TestGuestFiles pushes and pulls files of a sim guest through a real
// daemon and its real agent: a 100 MiB file round-trips with the same
// sha256 while the daemon's peak RSS (VmHWM) stays bounded; -p makes the
// parents; mode, uid and gid are applied; bad paths are 400, a missing one
// 404; a symlink out of the guest's root is answered as a symlink and never
// followed; a devlxd token never reaches the route; with files switched off
// in the guest the answer is 403 naming the switch.
func TestGuestFiles(t *testing.T) {
	t.Parallel()
	d := newTCPDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	g := d.launch(ctx, "files1", nil, nil)
	dir := t.TempDir()

	// guestlink info shows what the agent reports: features, the guest's
	// OS (its root's os-release), hostname, kernel, addresses.
	if err := os.MkdirAll(filepath.Join(g.root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(g.root, "etc", "os-release"), []byte("NAME=\"Debian GNU/Linux\"\nVERSION=\"12 (bookworm)\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The daemon serves the agent's report from a cache refreshed every
	// agentmon.GuestStateTTL, and launch's own polling may have filled it
	// before os-release was written: wait for the report that has it.
	testwait.For(t, "the agent's report naming the OS", opTimeout, func() bool {
		st, err := d.client.State(ctx, "files1")
		return err == nil && st.Guest != nil && st.Guest.State != nil && st.Guest.State.OS == "Debian GNU/Linux"
	})
	info := d.cli(ctx, "info", "files1")
	host, _ := os.Hostname()
	for _, want := range []string{"Agent features:  exec, files, state, freeze", "OS:  Debian GNU/Linux 12 (bookworm)", "Hostname:  " + host, "127.0.0.1/8 (local)"} {
		if !strings.Contains(strings.Join(strings.Fields(info), "  "), strings.Join(strings.Fields(want), "  ")) {
			t.Errorf("guestlink info lacks %q:\n%s", want, info)
		}
	}
	st, err := d.client.State(ctx, "files1")
	if err != nil || st.Guest == nil || st.Guest.State == nil || st.Guest.State.Network["lo"].Type != "loopback" {
		t.Fatalf("GET state: %+v, %v", st, err)
	}
	// The list's IPV4 comes from the cached report.
	list, err := d.client.Instances(ctx, client.InstanceFilter{})
	if err != nil || len(list) != 1 || list[0].IPv4 != st.Guest.State.IPv4() {
		t.Errorf("list: %+v, %v; want ipv4 %q", list, err, st.Guest.State.IPv4())
	}

	// 100 MiB there and back, with the daemon's peak RSS before and after.
	src := filepath.Join(dir, "big")
	const size = 100 << 20
	sum := writeRandom(t, src, size)
	pid := d.pid()
	before := procKB(t, pid, "VmHWM")
	d.cli(ctx, "file", "push", "-p", "--mode", "0640", src, "files1/srv/deep/big")
	back := filepath.Join(dir, "back")
	d.cli(ctx, "file", "pull", "files1/srv/deep/big", back)
	after := procKB(t, pid, "VmHWM")
	t.Logf("daemon peak RSS: %d MiB before, %d MiB after pushing and pulling %d MiB", before>>10, after>>10, size>>20)
	if grew := (after - before) << 10; grew > 40<<20 {
		t.Errorf("the daemon's peak RSS grew by %d MiB for a %d MiB push and pull: the body is buffered", grew>>20, size>>20)
	}
	inGuest := filepath.Join(g.root, "srv", "deep", "big")
	if fileSum(t, inGuest) != sum {
		t.Error("the pushed file differs from the source")
	}
	if fileSum(t, back) != sum {
		t.Error("the pulled file differs from the source")
	}
	if fi, err := os.Stat(inGuest); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("pushed with --mode 0640: %v %v", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(g.root, "srv", "deep")); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o755 {
		t.Errorf("-p made no 0755 parent: %v", err)
	}

	// Owner: applied where permitted (root may give any owner; anyone
	// else may not give root's).
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, []byte("small\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if os.Getuid() == 0 {
		d.cli(ctx, "file", "push", "--uid", "1234", "--gid", "2345", small, "files1/srv/owned")
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(g.root, "srv", "owned"), &st); err != nil || st.Uid != 1234 || st.Gid != 2345 {
			t.Errorf("pushed with --uid 1234 --gid 2345: owner %d:%d (%v)", st.Uid, st.Gid, err)
		}
	} else {
		_, errOut, err := d.runCLI(ctx, "file", "push", "--uid", "0", small, "files1/srv/owned")
		if err == nil || !strings.Contains(errOut, "not permitted") {
			t.Errorf("non-root push with --uid 0: %v %s", err, errOut)
		}
	}

	// Bad paths, missing paths, a symlink out of the root.
	if err := os.Symlink(g.dir, filepath.Join(g.root, "out")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path string
		code       int
	}{
		{"relative", "srv/deep/big", 400},
		{"dot dot", "/srv/../../../etc/passwd", 400},
		{"NUL", "/srv/de\x00ep", 400},
		{"missing", "/srv/missing", 404},
		{"through a symlink out", "/out/rootfs/srv/deep/big", 403},
	} {
		t.Run("pull "+tc.name, func(t *testing.T) {
			_, err := d.client.PullFile(ctx, "files1", tc.path)
			var se *client.StatusError
			if !errors.As(err, &se) || se.Code != tc.code {
				t.Errorf("PullFile(%q) = %v, want %d", tc.path, err, tc.code)
			} else if strings.Contains(se.Message, g.dir) {
				t.Errorf("PullFile(%q) names the host path: %s", tc.path, se.Message)
			}
		})
	}
	f, err := d.client.PullFile(ctx, "files1", "/out")
	if err != nil || f.Type != client.FileTypeSymlink || f.Target != g.dir {
		t.Errorf("pulling the symlink itself: %+v, %v", f, err)
	}
	err = d.client.PushFile(ctx, "files1", "/out/planted", strings.NewReader("x"), 1, client.FileArgs{})
	if !errors.Is(err, errdefs.ErrForbidden) {
		t.Errorf("pushing through the symlink out: %v, want 403", err)
	}
	if _, err := os.Lstat(filepath.Join(g.dir, "planted")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file was planted outside the guest's root: %v", err)
	}

	// A devlxd token is no admin credential.
	if _, err := d.client.CreateDevlxdIdentity(ctx, "csi", []string{"files1"}); err != nil {
		t.Fatal(err)
	}
	tok, err := d.client.IssueDevlxdToken(ctx, "csi", "")
	if err != nil {
		t.Fatal(err)
	}
	dc, err := client.NewWithOptions(d.httpURL, client.Options{Token: tok.Token})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	if _, err := dc.PullFile(ctx, "files1", "/srv/deep/big"); !errors.Is(err, errdefs.ErrUnauthorized) {
		t.Errorf("pull with a devlxd token: %v, want 401", err)
	}
	if err := dc.PushFile(ctx, "files1", "/srv/by-token", strings.NewReader("x"), 1, client.FileArgs{}); !errors.Is(err, errdefs.ErrUnauthorized) {
		t.Errorf("push with a devlxd token: %v, want 401", err)
	}
	if _, err := os.Lstat(filepath.Join(g.root, "srv", "by-token")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a devlxd token wrote a file: %v", err)
	}

	// A viewer may read instances, not a guest's files.
	if _, err := d.client.CreateBearerIdentityWith(ctx, api.IdentitiesBearerPost{Name: "watcher", Role: "viewer"}); err != nil {
		t.Fatal(err)
	}
	vtok, err := d.client.IssueToken(ctx, "watcher", "")
	if err != nil {
		t.Fatal(err)
	}
	vc, err := client.NewWithOptions(d.httpURL, client.Options{Token: vtok.Token})
	if err != nil {
		t.Fatal(err)
	}
	defer vc.Close()
	if _, err := vc.PullFile(ctx, "files1", "/srv/deep/big"); !errors.Is(err, errdefs.ErrForbidden) {
		t.Errorf("pull by a viewer: %v, want 403", err)
	}

	// The guest's admin switches files off.
	if err := os.MkdirAll(filepath.Join(g.root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(g.root, "etc", "guestlink-agent.yaml"), []byte("features:\n  files: false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = d.client.PullFile(ctx, "files1", "/srv/deep/big")
	var se *client.StatusError
	if !errors.As(err, &se) || se.Code != http.StatusForbidden || !strings.Contains(se.Message, "features.files: false in /etc/guestlink-agent.yaml") {
		t.Errorf("pull with files off: %v, want 403 naming the switch", err)
	}
	// The daemon's report is at most agentmon.GuestStateTTL old: once it
	// is renewed, info no longer lists files.
	testwait.For(t, "guestlink info without the files feature", opTimeout, func() bool {
		info := d.cli(ctx, "info", "files1")
		return strings.Contains(strings.Join(strings.Fields(info), " "), "Agent features: exec, state, freeze")
	})
	_, errOut, err := d.runCLI(ctx, "file", "delete", "files1/srv/deep/big")
	if err == nil || !strings.Contains(errOut, "features.files: false") {
		t.Errorf("delete with files off: %v %s", err, errOut)
	}
	if _, err := os.Stat(inGuest); err != nil {
		t.Errorf("the refused delete removed the file: %v", err)
	}
}

// TestFilePushMissingParent pushes a file bigger than any socket buffer
// to a path whose parent directory does not exist, without -p: the agent
// refuses it with 404 before it reads the body, and every client must
// read that answer, not the broken pipe of a body the daemon stopped
// reading. Tried: guestlink file push (the CLI over the admin socket),
// the Go client, LXD's client's request (net/http, a plain POST with a
// Content-Length and no Expect), curl (which sends Expect: 100-continue
// for a big body) and curl without Expect; each several times, since a
// lost answer is a race between the daemon closing and the client
// reading. After the refusals, the daemon still answers and -p pushes.
func TestFilePushMissingParent(t *testing.T) {
	t.Parallel()
	curl, err := exec.LookPath("curl")
	if err != nil {
		testenv.Requires(t, "curl", "the test pushes with curl as a script would")
	}
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	g := d.launch(ctx, "pushmiss", nil, nil)
	src := filepath.Join(t.TempDir(), "big")
	const size = 32 << 20
	writeRandom(t, src, size)
	const target = "/srv/missing/dir/file"
	// wantRefusal checks an answer: 404 with the agent's message, which
	// names the guest's path and no host path.
	wantRefusal := func(t *testing.T, how string, code int, msg string) {
		t.Helper()
		if code != http.StatusNotFound || !strings.Contains(msg, "/srv/missing/dir") || strings.Contains(msg, g.dir) {
			t.Errorf("%s: %d %q, want 404 naming /srv/missing/dir", how, code, msg)
		}
	}
	sock := filepath.Join(d.stateDir, "guestlink.sock")
	url := "http://unix/1.0/instances/pushmiss/files?path=" + target
	for i := range 3 {
		t.Run("cli", func(t *testing.T) {
			_, errOut, err := d.runCLI(ctx, "file", "push", src, "pushmiss"+target)
			if err == nil || strings.Contains(errOut, "broken pipe") || strings.Contains(errOut, "connection reset") {
				t.Fatalf("push %d: %v, stderr %q; want the agent's 404", i, err, errOut)
			}
			wantRefusal(t, "guestlink file push", http.StatusNotFound, errOut)
		})
		t.Run("go client", func(t *testing.T) {
			f, err := os.Open(src)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			err = d.client.PushFile(ctx, "pushmiss", target, f, size, client.FileArgs{})
			var se *client.StatusError
			if !errors.As(err, &se) {
				t.Fatalf("PushFile: %v, want a StatusError", err)
			}
			wantRefusal(t, "PushFile", se.Code, se.Message)
		})
		t.Run("lxd client", func(t *testing.T) {
			// LXD's client (lxd/client InstanceFileArgs) posts the
			// content with net/http: a Content-Length, its X-LXD
			// headers and no Expect.
			f, err := os.Open(src)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var dialer net.Dialer
				return dialer.DialContext(ctx, "unix", sock)
			}}}
			defer hc.CloseIdleConnections()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, f)
			if err != nil {
				t.Fatal(err)
			}
			req.ContentLength = size
			req.Header.Set("Content-Type", "application/octet-stream")
			req.Header.Set("X-LXD-type", "file")
			req.Header.Set("X-LXD-write", "overwrite")
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatalf("POST: %v, want the agent's 404", err)
			}
			defer resp.Body.Close()
			var env api.Response[json.RawMessage]
			if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
				t.Fatalf("decoding the answer: %v", err)
			}
			wantRefusal(t, "net/http POST", resp.StatusCode, env.Error)
		})
		for _, expect := range []string{"", "Expect:"} {
			t.Run("curl "+expect, func(t *testing.T) {
				args := []string{"-sS", "--unix-socket", sock, "-X", "POST", "--data-binary", "@" + src,
					"-H", "Content-Type: application/octet-stream", "-o", "-", "-w", "\n%{http_code}", url}
				if expect != "" {
					args = append(args, "-H", expect)
				}
				out, err := exec.CommandContext(ctx, curl, args...).CombinedOutput()
				if err != nil {
					t.Fatalf("curl %q: %v\n%s", expect, err, out)
				}
				nl := strings.LastIndexByte(string(out), '\n')
				body, code := string(out[:max(nl, 0)]), string(out[nl+1:])
				var env api.Response[json.RawMessage]
				if err := json.Unmarshal([]byte(body), &env); err != nil {
					t.Fatalf("curl %q: %v in %q", expect, err, out)
				}
				n, _ := strconv.Atoi(code)
				wantRefusal(t, "curl", n, env.Error)
			})
		}
	}
	if _, err := os.Lstat(filepath.Join(g.root, "srv", "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused push made its parent: %v", err)
	}
	d.cli(ctx, "file", "push", "-p", src, "pushmiss"+target)
	if fi, err := os.Stat(filepath.Join(g.root, "srv", "missing", "dir", "file")); err != nil || fi.Size() != size {
		t.Errorf("push -p after the refusals: %v", err)
	}
}
