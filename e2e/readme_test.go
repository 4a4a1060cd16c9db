package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeCommand says what TestREADME does with one command of the
// README's shell blocks: run it (exit is its expected status) or not, and
// why (skip: where it is tested instead, or what keeps it out of a test).
type readmeCommand struct {
	exit int
	skip string
}

// readmeCommands is every command of README.md's ```sh blocks, as written
// (without its comment). A README edit that adds, changes or drops a
// command fails TestREADME until this table says how it is tested.
var readmeCommands = map[string]readmeCommand{
	// The two commands of the top.
	"make run":  {skip: "starts the daemon in the foreground: e2e TestRunPicksFreePort and TestRunRefusesTakenPort run scripts/run.sh; this test starts the same guestlinkd on a fresh state directory"},
	"make test": {skip: "the whole suite (25+ minutes, installs packages); it runs this test"},
	// Try it: run, in order, in one shell.
	"export GUESTLINK_STATE_DIR=$PWD/.run":                          {skip: "points at make run's state: this test exports its fresh daemon's state directory instead"},
	"bin/guestlink list":                                            {},
	"bin/guestlink launch web1 --backend sim -c user.role=frontend": {},
	"bin/guestlink info web1 --format json":                         {},
	`sock=$(bin/guestlink info web1 --format json | sed -n 's/.*"devlxd_socket": *"\([^"]*\)".*/\1/p' | head -n1)`: {},
	`curl -s --unix-socket "$sock" lxd/1.0`:                                                                             {},
	`GUESTLINK_AGENT_DEVLXD_SOCKET="$sock" bin/guestlink-agent ready`:                                                   {},
	"bin/guestlink wait web1 --for ready --timeout 2m":                                                                  {},
	"bin/guestlink launch web2 --backend sim -c readiness.probe.http=http://127.0.0.1:8081/ --wait ready --timeout 30s": {exit: 2},
	"bin/guestlink monitor --since 0":                                                                                   {skip: "follows until Ctrl-C: client/cli TestMonitor"},
	"bin/guestlink console web1 --follow":                                                                               {skip: "follows until Ctrl-C: e2e TestConsole follows a sim guest's console"},
	"bin/guestlink exec web1 -- sh -c 'uname -a; exit 3'":                                                               {exit: 3},
	"bin/guestlink snapshot create web1 s0":                                                                             {},
	"bin/guestlink restore web1 s0":                                                                                     {},
	"bin/guestlink stop --all":                                                                                          {},
	"bin/guestlink profile show default":                                                                                {},
	"source <(bin/guestlink completion bash)":                                                                           {},
	// The VM path.
	"bin/guestlink image import /path/to/disk.img --alias mydistro":                                                                  {skip: "a placeholder path: e2e TestQEMUImage imports a real image"},
	"bin/guestlink image list":                                                                                                       {skip: "QEMU images: e2e TestQEMUImage"},
	"bin/guestlink launch mydistro vm1 --backend qemu":                                                                               {skip: "boots QEMU: e2e TestQEMUImage"},
	"bin/guestlink image info mydistro":                                                                                              {skip: "QEMU images: e2e TestQEMUImage"},
	"bin/guestlink delete --force vm1 && bin/guestlink image delete mydistro":                                                        {skip: "QEMU images: e2e TestQEMUImage"},
	"make guest-image-debian && bin/guestlink launch debian-12 deb1 --backend qemu --wait ready --timeout 10m":                       {skip: "builds Debian and boots it under QEMU (minutes): e2e TestQEMUDebian runs the VM path"},
	"make guest-image-debian-13 && bin/guestlink launch debian-13 deb2 --backend qemu -c qemu.vsock=user --wait ready --timeout 10m": {skip: "builds Debian 13 and boots it under QEMU (minutes): e2e TestQEMUDebianSystemdReady runs it, Ready from systemd over vsock"},
	"make packages": {skip: "builds the .deb packages: packaging TestAgentPackage and TestHostPackage"},
	// Remote access.
	"bin/guestlink dashboard --print-url":                                                  {skip: "remote access on the fixed port 8080 of make run: e2e TestRemoteAccess"},
	"bin/guestlink auth identity create bearer/ci":                                         {skip: "remote access: e2e TestRemoteAccess"},
	"TOKEN=$(bin/guestlink auth identity token issue bearer/ci --expiry 24h)":              {skip: "remote access: e2e TestRemoteAccess"},
	`curl -H "Authorization: Bearer $TOKEN" http://127.0.0.1:8080/1.0/instances`:           {skip: "the fixed port 8080 of make run: e2e TestRemoteAccess"},
	`curl -H "Authorization: Bearer $TOKEN" http://127.0.0.1:8080/metrics`:                 {skip: "the fixed port 8080 of make run: e2e TestRemoteAccess"},
	`printf '%s\n' "$TOKEN" | bin/guestlink remote add ci http://127.0.0.1:8080 --token -`: {skip: "the fixed port 8080 of make run: e2e TestRemoteTokenNotInArgv"},
	"bin/guestlink --remote ci list":                                                       {skip: "remote access: e2e TestRemoteAccess"},
	`bin/guestlinkd --state-dir "$GUESTLINK_STATE_DIR" --https 0.0.0.0:8443`:               {skip: "listens on every interface, port 8443: e2e TestHTTPSCertificate"},
	"guestlink remote add box https://HOST:8443 --accept-certificate":                      {skip: "HOST is a placeholder: e2e TestHTTPSCertificate"},
	"guestlink config trust add client.crt":                                                {skip: "a second machine's file: e2e TestHTTPSCertificate"},
	"guestlink remote switch box && guestlink list":                                        {skip: "a second machine: e2e TestRemoteSwitchKeepsStateDirLocal"},
	"guestlink remote list":                                                                {skip: "a second machine: e2e TestRemoteSwitchKeepsStateDirLocal"},
	"guestlink remote switch local":                                                        {skip: "a second machine: e2e TestRemoteSwitchKeepsStateDirLocal"},
	// Several hosts.
	`(umask 077; echo "$DB" >/etc/guestlink/database)`: {skip: "writes /etc and needs PostgreSQL: make cluster-demo, e2e TestClusterDemoCheck"},
	"guestlinkd --state-dir /var/lib/guestlink --database-file /etc/guestlink/database --name host1 --cluster-address 10.0.0.1:8444":                        {skip: "a real host's paths and address: e2e TestCluster, TestClusterDemoCheck"},
	"(umask 077; guestlink cluster add host2 >join.token)":                                                                                                  {skip: "a cluster: e2e TestCluster"},
	"guestlinkd --state-dir /var/lib/guestlink --database-file /etc/guestlink/database --name host2 --cluster-address 10.0.0.2:8444 --join-file join.token": {skip: "a second host: e2e TestCluster"},
	"guestlink cluster list && guestlink launch web1 --target host2 && guestlink list":                                                                      {skip: "a cluster: e2e TestCluster, TestClusterDemoCheck"},
}

// readmeComment is a command's trailing comment.
var readmeComment = regexp.MustCompile(`\s+#\s.*$`)

// readmeShellCommands returns the commands of the ```sh blocks of the
// README at path, in order, without comments or comment lines.
func readmeShellCommands(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cmds []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "```sh"):
			in = true
		case strings.HasPrefix(line, "```"):
			in = false
		case in:
			line = strings.TrimSpace(readmeComment.ReplaceAllString(line, ""))
			if line != "" && !strings.HasPrefix(line, "#") {
				cmds = append(cmds, line)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return cmds
}

// TestREADME runs the README's commands that can run in a test, exactly
// as written, in one bash shell, in order, against a fresh daemon (the
// binaries as bin/ of a temporary directory, GUESTLINK_STATE_DIR its state
// directory, a private XDG_CONFIG_HOME): each must exit as the table
// says. Every README command must be in readmeCommands, run or skipped
// with its reason, and every entry must still be in the README.
func TestREADME(t *testing.T) {
	t.Parallel()
	cmds := readmeShellCommands(t, filepath.Join("..", "README.md"))
	seen := map[string]bool{}
	for _, c := range cmds {
		seen[c] = true
		if _, ok := readmeCommands[c]; !ok {
			t.Errorf("README command %q: not in readmeCommands (run it, or skip it with the reason)", c)
		}
	}
	for c := range readmeCommands {
		if !seen[c] {
			t.Errorf("readmeCommands has %q, which the README no longer shows", c)
		}
	}
	if t.Failed() {
		return
	}

	d := newDaemon(t)
	work := t.TempDir()
	if err := os.Symlink(binDir, filepath.Join(work, "bin")); err != nil {
		t.Fatal(err)
	}
	var script strings.Builder
	script.WriteString("export GUESTLINK_STATE_DIR=" + d.stateDir + "\n")
	ran := 0
	for i, c := range cmds {
		rc := readmeCommands[c]
		if rc.skip != "" {
			continue
		}
		ran++
		fmt.Fprintf(&script, "echo '--- README: %d' >&2\n%s\nrc=$?; if [ $rc -ne %d ]; then echo \"README command %d exited $rc, want %d\" >&2; exit 100; fi\n",
			i, c, rc.exit, i, rc.exit)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = work
	cmd.Env = append(cleanEnv(), "XDG_CONFIG_HOME="+filepath.Join(work, "config"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's commands (%d run): %v\n%s", ran, err, out)
	}
	// What the commands did, seen from the daemon: both guests exist,
	// stopped by stop --all, and web1 has its snapshot.
	for _, want := range []string{`"name": "web1"`, `"user.role": "frontend"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("info web1 --format json printed no %s:\n%s", want, out)
		}
	}
	list := d.cli(ctx, "list", "--format", "json")
	if !strings.Contains(list, `"web1"`) || !strings.Contains(list, `"web2"`) || strings.Contains(list, `"Running"`) {
		t.Errorf("after the README: list %s", list)
	}
}
