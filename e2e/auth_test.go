package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/internal/testcert"

	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/core/auth"
	"github.com/guestlink/guestlink/db"
)

// tcpDaemon is a daemon serving --http and --https on loopback ports, with
// what its log says about them.
type tcpDaemon struct {
	*daemonProc
	httpURL     string // http://127.0.0.1:PORT
	httpsURL    string // https://127.0.0.1:PORT
	fingerprint string // of the HTTPS certificate, as logged
	loginURL    string // the one-time login URL logged at start
}

var (
	loginLine = regexp.MustCompile(`msg="dashboard login URL" url="?(http://[^" ]+)`)
	tlsLine   = regexp.MustCompile(`msg="serving the admin API and the dashboard over TLS" addr=(\S+) certificate_fingerprint=([0-9a-f]{64})`)
)

// newTCPDaemon starts a daemon with TCP listeners and waits for its
// "guestlinkd started" line, which comes after they listen.
func newTCPDaemon(t *testing.T) *tcpDaemon {
	t.Helper()
	d := &tcpDaemon{daemonProc: newDaemon(t, "--http", "127.0.0.1:0", "--https", "127.0.0.1:0")}
	if !waitFor(t, d.daemonProc, 1) {
		t.Fatalf("no start line in the log:\n%s", d.logTail(logTailLines))
	}
	log := d.log()
	m := loginLine.FindStringSubmatch(log)
	tm := tlsLine.FindStringSubmatch(log)
	if m == nil || tm == nil {
		t.Fatalf("log lacks the login URL or the TLS line:\n%s", log)
	}
	d.loginURL = m[1]
	d.httpURL = m[1][:strings.Index(m[1], "/login")]
	d.httpsURL, d.fingerprint = "https://"+tm[1], tm[2]
	return d
}

// remoteCLI runs the CLI with its own configuration directory (and no
// state directory, so only remotes can work).
func (d *tcpDaemon) remoteCLI(ctx context.Context, configDir string, args ...string) (string, string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "guestlink"), args...)
	cmd.Env = append(cleanEnv(), "GUESTLINK_CONFIG_DIR="+configDir)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

// mustRemote is remoteCLI that fails the test on a non-zero exit.
func (d *tcpDaemon) mustRemote(ctx context.Context, configDir string, args ...string) string {
	d.t.Helper()
	out, errOut, err := d.remoteCLI(ctx, configDir, args...)
	if err != nil {
		d.t.Fatalf("guestlink %s: %v\nstderr: %s", strings.Join(args, " "), err, errOut)
	}
	return out
}

// insecureClient is an HTTP client that accepts any server certificate
// and presents none.
func insecureClient() *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
}

// checkMode fails unless path has exactly mode.
func checkMode(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != mode {
		t.Errorf("%s has mode %v, want %v", path, fi.Mode().Perm(), mode)
	}
}

// TestRemoteAccess drives the real daemon over TCP with the real CLI: a
// bearer token over http, a trusted client certificate over https with a
// pinned fingerprint, each refused before it is valid and after it is
// revoked; tokens are stored hashed and key files are private.
func TestRemoteAccess(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	d := newTCPDaemon(t)
	cfg := t.TempDir()
	checkMode(t, filepath.Join(d.stateDir, "pki", "https.key"), 0o600)
	// devlxd's session ticket keys, kept across restarts (docs/security.md).
	checkMode(t, filepath.Join(d.stateDir, "pki", "devlxd-ticket-keys"), 0o600)

	// Nothing without credentials, on both listeners.
	for _, base := range []string{d.httpURL, d.httpsURL} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/1.0/instances", nil)
		resp, err := insecureClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("GET %s/1.0/instances without credentials: %d, want 401", base, resp.StatusCode)
		}
	}

	// A bearer identity; the token is printed alone on stdout.
	d.cli(ctx, "auth", "identity", "create", "bearer/ci")
	out := d.cli(ctx, "auth", "identity", "token", "issue", "bearer/ci", "--expiry", "1h")
	token := strings.TrimSuffix(out, "\n")
	if !regexp.MustCompile(`^glb_[A-Za-z0-9_-]{43}$`).MatchString(token) {
		t.Fatalf("token issue printed %q, want the token alone", out)
	}
	if list := d.cli(ctx, "auth", "identity", "list"); strings.Contains(list, token) || !strings.Contains(list, "bearer/ci") {
		t.Fatalf("identity list:\n%s", list)
	}

	// Stored only as its SHA-256: the row holds the hash, no file of the
	// state directory holds the token.
	sum := sha256.Sum256([]byte(token))
	st, err := db.Open(ctx, db.DefaultURL(d.stateDir))
	if err != nil {
		t.Fatal(err)
	}
	row, err := st.(auth.Store).Identity(ctx, "ci")
	st.Close()
	if err != nil || row.TokenHash != hex.EncodeToString(sum[:]) {
		t.Fatalf("identity row = %+v, %v; want the token's SHA-256", row, err)
	}
	_ = filepath.WalkDir(d.stateDir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return nil
		}
		if data, err := os.ReadFile(path); err == nil && bytes.Contains(data, []byte(token[4:])) {
			t.Errorf("%s holds the token in clear", path)
		}
		return nil
	})

	// The CLI over http with the token.
	d.mustRemote(ctx, cfg, "remote", "add", "tok", d.httpURL, "--token", token)
	checkMode(t, filepath.Join(cfg, "remotes.json"), 0o600)
	d.mustRemote(ctx, cfg, "--remote", "tok", "launch", "b1", "-c", "sim.command=sleep 600")
	if out := d.mustRemote(ctx, cfg, "--remote", "tok", "list"); !strings.Contains(out, "b1") {
		t.Fatalf("list over a token:\n%s", out)
	}

	// The CLI over https with its client certificate: first contact shows
	// the fingerprint the daemon logged, and needs a decision.
	_, errOut, err := d.remoteCLI(ctx, cfg, "remote", "add", "sec", d.httpsURL)
	if err == nil || !strings.Contains(errOut, d.fingerprint) || !strings.Contains(errOut, "--accept-certificate") {
		t.Fatalf("first contact without --fingerprint: %v\n%s", err, errOut)
	}
	out = d.mustRemote(ctx, cfg, "remote", "add", "sec", d.httpsURL, "--fingerprint", d.fingerprint)
	certPath := filepath.Join(cfg, "client.crt")
	if !strings.Contains(out, certPath) {
		t.Fatalf("remote add does not print the certificate path:\n%s", out)
	}
	checkMode(t, filepath.Join(cfg, "client.key"), 0o600)
	if _, errOut, err := d.remoteCLI(ctx, cfg, "--remote", "sec", "list"); err == nil || !strings.Contains(errOut, "not trusted") {
		t.Fatalf("list before the certificate is trusted: %v\n%s", err, errOut)
	}
	d.cli(ctx, "config", "trust", "add", certPath, "--name", "laptop")
	d.mustRemote(ctx, cfg, "remote", "switch", "sec")
	d.mustRemote(ctx, cfg, "launch", "c1", "-c", "sim.command=sleep 600")
	if out := d.mustRemote(ctx, cfg, "list"); !strings.Contains(out, "b1") || !strings.Contains(out, "c1") {
		t.Fatalf("list over a certificate:\n%s", out)
	}
	// A wrong pin is refused before anything is sent.
	d.mustRemote(ctx, cfg, "remote", "add", "pinned-wrong", d.httpsURL, "--fingerprint", strings.Repeat("ab", 32))
	if _, errOut, err := d.remoteCLI(ctx, cfg, "--remote", "pinned-wrong", "list"); err == nil || !strings.Contains(errOut, "fingerprint mismatch") {
		t.Fatalf("wrong pin: %v\n%s", err, errOut)
	}

	// Who did it: the timeline names the identity.
	for name, want := range map[string]string{"b1": "api: bearer/ci", "c1": "api: tls laptop "} {
		tl, err := d.client.Timeline(ctx, name, 0)
		if err != nil || len(tl) == 0 {
			t.Fatalf("timeline of %s: %v", name, err)
		}
		if !strings.HasPrefix(tl[0].Cause, want) {
			t.Errorf("timeline of %s starts with cause %q, want %q...", name, tl[0].Cause, want)
		}
	}

	// The dashboard login URL, alone on stdout.
	out = d.mustRemote(ctx, cfg, "dashboard", "--print-url")
	if !regexp.MustCompile(`^` + regexp.QuoteMeta(d.httpURL) + `/login\?token=gll_[A-Za-z0-9_-]{43}\n$`).MatchString(out) {
		t.Fatalf("dashboard --print-url printed %q", out)
	}

	// Revoked: the token and the certificate stop working.
	d.cli(ctx, "auth", "identity", "token", "revoke", "bearer/ci")
	if _, errOut, err := d.remoteCLI(ctx, cfg, "--remote", "tok", "list"); err == nil || !strings.Contains(errOut, "invalid bearer token") {
		t.Fatalf("revoked token: %v\n%s", err, errOut)
	}
	fp := strings.Fields(strings.Split(d.cli(ctx, "config", "trust", "list"), "\n")[1])[1]
	d.cli(ctx, "config", "trust", "remove", fp)
	if _, errOut, err := d.remoteCLI(ctx, cfg, "list"); err == nil || !strings.Contains(errOut, "not trusted") {
		t.Fatalf("removed certificate: %v\n%s", err, errOut)
	}
}

// TestViewerRole drives a viewer bearer identity and a viewer client
// certificate through the real CLI and client over TCP: they list, show and
// follow events; every change and everything under /1.0/auth and
// /1.0/certificates is refused 403 with a message naming the role.
func TestViewerRole(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	d := newTCPDaemon(t)
	d.cli(ctx, "launch", "v1", "-c", "sim.command=sleep 600")

	if _, errOut, err := d.runCLI(ctx, "auth", "identity", "create", "bearer/bad", "--role", "root"); err == nil || !strings.Contains(errOut, `invalid role "root": want admin or viewer`) {
		t.Fatalf("create with role root: %v\n%s", err, errOut)
	}
	d.cli(ctx, "auth", "identity", "create", "bearer/watch", "--role", "viewer")
	token := strings.TrimSpace(d.cli(ctx, "auth", "identity", "token", "issue", "bearer/watch"))
	if list := d.cli(ctx, "auth", "identity", "list"); !regexp.MustCompile(`bearer\s+watch\s+bearer/watch\s+viewer\s+live`).MatchString(list) {
		t.Fatalf("identity list lacks bearer/watch as a viewer:\n%s", list)
	}

	cfg := t.TempDir()
	d.mustRemote(ctx, cfg, "remote", "add", "tok", d.httpURL, "--token", token)
	d.mustRemote(ctx, cfg, "remote", "add", "sec", d.httpsURL, "--fingerprint", d.fingerprint)
	d.cli(ctx, "config", "trust", "add", filepath.Join(cfg, "client.crt"), "--name", "wall", "--role", "viewer")
	if list := d.cli(ctx, "config", "trust", "list"); !regexp.MustCompile(`wall\s+[0-9a-f]{64}\s+viewer\s`).MatchString(list) {
		t.Fatalf("trust list lacks wall as a viewer:\n%s", list)
	}

	for _, remote := range []string{"tok", "sec"} {
		who := map[string]string{"tok": "bearer/watch", "sec": "tls wall"}[remote]
		// Reads.
		if out := d.mustRemote(ctx, cfg, "--remote", remote, "list"); !strings.Contains(out, "v1") {
			t.Fatalf("%s: list:\n%s", remote, out)
		}
		if out := d.mustRemote(ctx, cfg, "--remote", remote, "info", "v1"); !strings.Contains(out, "Status:") {
			t.Fatalf("%s: info:\n%s", remote, out)
		}
		// Changes and the admin's routes.
		for _, args := range [][]string{
			{"launch", "v2"}, {"stop", "v1", "--force"}, {"config", "set", "v1", "user.x", "1"}, {"delete", "v1", "--force"},
			{"auth", "identity", "create", "bearer/mine"}, {"auth", "identity", "list"}, {"config", "trust", "list"},
			{"dashboard", "--print-url"},
		} {
			_, errOut, err := d.remoteCLI(ctx, cfg, append([]string{"--remote", remote}, args...)...)
			if err == nil || !strings.Contains(errOut, who) || !strings.Contains(errOut, "has the role viewer") {
				t.Errorf("%s: guestlink %s: %v, stderr %q; want refused for the viewer role", remote, strings.Join(args, " "), err, errOut)
			}
		}
	}
	if inst, err := d.client.Instance(ctx, "v1"); err != nil || inst.Status != "Running" || inst.Config["user.x"] != "" {
		t.Fatalf("v1 after the viewers: %+v, %v; want it running and unchanged", inst, err)
	}

	// The events stream is a read: a viewer follows it.
	c, err := client.NewWithOptions(d.httpURL, client.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	evc, errc := c.Events(sctx, client.EventFilter{})
	d.cli(ctx, "config", "set", "v1", "user.seen", "yes")
	for {
		select {
		case ev, ok := <-evc:
			if !ok {
				t.Fatalf("viewer's event stream ended: %v", <-errc)
			}
			if strings.Contains(string(ev.Metadata), "instance-updated") {
				return
			}
		case <-ctx.Done():
			t.Fatal("the viewer saw no instance-updated event")
		}
	}
}

// TestListenRefused checks that plain HTTP on a non-loopback address, and
// other bad listener settings, stop the daemon at start with a message
// naming the fix.
func TestListenRefused(t *testing.T) {
	t.Parallel()
	binaries(t)
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"all addresses", []string{"--http", "0.0.0.0:0"}, "--https"},
		{"no host", []string{"--http", ":0"}, "--https"},
		{"a LAN address", []string{"--http", "192.0.2.1:0"}, "--https"},
		{"IPv6 any", []string{"--http", "[::]:0"}, "--https"},
		{"key without cert", []string{"--https", "127.0.0.1:0", "--tls-key", "/x"}, "go together"},
		{"cert without https", []string{"--tls-cert", "/x", "--tls-key", "/y"}, "needs --https"},
		{"host with a port", []string{"--http", "127.0.0.1:0", "--http-host", "example.com:80"}, "--http-host"},
		{"host as an IP", []string{"--http", "127.0.0.1:0", "--http-host", "192.0.2.1"}, "--http-host"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(binDir, "guestlinkd"),
				append([]string{"--state-dir", dir, "--plugin-dir", filepath.Join(binDir, "plugins")}, tt.args...)...)
			cmd.Env = cleanEnv()
			var errOut bytes.Buffer
			cmd.Stderr = &errOut
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(errOut.String(), tt.want) {
				t.Fatalf("guestlinkd %v: %v, stderr %q; want exit 1 naming %q", tt.args, err, errOut.String(), tt.want)
			}
			if _, err := os.Stat(filepath.Join(dir, "guestlink.db")); err == nil {
				t.Errorf("a refused start opened the database")
			}
		})
	}
}

// TestOtherLocalUser runs curl as a real unprivileged user (nobody, via
// setpriv) against a daemon with TCP listeners: every attempt, reading
// or launching a guest that would run its command as root, is refused.
func TestOtherLocalUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch to another user with setpriv")
	}
	setpriv, err1 := exec.LookPath("setpriv")
	curl, err2 := exec.LookPath("curl")
	if err1 != nil || err2 != nil {
		t.Skipf("needs setpriv and curl: %v %v", err1, err2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	d := newTCPDaemon(t)
	launch := `{"name":"pwn","backend":"sim","config":{"sim.command":"touch /tmp/pwned"},"start":true}`
	asNobody := func(args ...string) (string, int) {
		cmd := exec.CommandContext(ctx, setpriv, append([]string{"--reuid", "65534", "--regid", "65534", "--clear-groups", "--",
			curl, "-s", "-k", "-o", "/dev/null", "-w", "%{http_code}"}, args...)...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/"}
		out, err := cmd.Output()
		var ee *exec.ExitError
		code := 0
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("running curl as nobody: %v", err)
		}
		return string(out), code
	}
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"list over http", []string{d.httpURL + "/1.0/instances"}, "401"},
		{"launch over http", []string{"-X", "POST", "-H", "Content-Type: application/json", "-d", launch, d.httpURL + "/1.0/instances"}, "401"},
		{"launch over https", []string{"-X", "POST", "-H", "Content-Type: application/json", "-d", launch, d.httpsURL + "/1.0/instances"}, "401"},
		{"guessed token", []string{"-H", "Authorization: Bearer glb_" + strings.Repeat("A", 43), d.httpURL + "/1.0/instances"}, "401"},
		{"trust itself", []string{"-X", "POST", "-H", "Content-Type: application/json", "-d", `{"certificate":"x"}`, d.httpsURL + "/1.0/certificates"}, "401"},
		{"mint a token", []string{"-X", "POST", d.httpURL + "/1.0/auth/identities/bearer/ci/token"}, "401"},
		{"mint a login URL", []string{"-X", "POST", d.httpURL + "/1.0/auth/dashboard-logins"}, "401"},
		{"the admin socket", []string{"--unix-socket", filepath.Join(d.stateDir, "guestlink.sock"), "http://x/1.0/instances"}, "000"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got, _ := asNobody(tt.args...); got != tt.want {
				t.Fatalf("HTTP status %q, want %s", got, tt.want)
			}
		})
	}
	list, err := d.client.Instances(ctx, client.InstanceFilter{})
	if err != nil || len(list) != 0 {
		t.Fatalf("instances after the attempts: %+v, %v", list, err)
	}
}

// TestHTTPSCertificate checks the daemon's HTTPS certificate: the
// self-signed one is made once and kept across restarts (a pinned
// fingerprint stays valid), and --tls-cert/--tls-key replace it.
func TestHTTPSCertificate(t *testing.T) {
	t.Parallel()
	d := newTCPDaemon(t)
	first := d.fingerprint
	if err := d.signal(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	d.start()
	if !waitFor(t, d.daemonProc, 2) {
		t.Fatalf("no second TLS line:\n%s", d.logTail(logTailLines))
	}
	all := tlsLine.FindAllStringSubmatch(d.log(), -1)
	if got := all[len(all)-1][2]; got != first {
		t.Fatalf("fingerprint after restart %s, want %s", got, first)
	}

	// An operator's own certificate.
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	own := writeServerPair(t, certFile, keyFile)
	d2 := &tcpDaemon{daemonProc: newDaemon(t, "--https", "127.0.0.1:0", "--tls-cert", certFile, "--tls-key", keyFile)}
	if !waitFor(t, d2.daemonProc, 1) {
		t.Fatalf("no TLS line:\n%s", d2.logTail(logTailLines))
	}
	if got := tlsLine.FindStringSubmatch(d2.log())[2]; got != own {
		t.Fatalf("fingerprint with --tls-cert %s, want %s", got, own)
	}
	if _, err := os.Stat(filepath.Join(d2.stateDir, "pki", "https.key")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a self-signed key was made beside --tls-cert: %v", err)
	}
}

// waitFor waits until the daemon's log holds n "guestlinkd started" lines
// (each comes after the listeners of that start).
func waitFor(t *testing.T, d *daemonProc, n int) bool {
	t.Helper()
	deadline := time.Now().Add(daemonStartTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for strings.Count(d.log(), `msg="guestlinkd started"`) < n {
		if time.Now().After(deadline) || !d.running() {
			return false
		}
		<-tick.C
	}
	return true
}

// writeServerPair writes a self-signed ECDSA server pair and returns the
// certificate's fingerprint.
func writeServerPair(t *testing.T, certFile, keyFile string) string {
	t.Helper()
	p := testcert.NewWith(t, "operator", testcert.Options{Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	p.WriteFiles(t, certFile, keyFile)
	return p.Fingerprint()
}
