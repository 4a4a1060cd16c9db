package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/api"
)

// TestProfileCLI drives "guestlink profile" and "launch -p" through a real
// daemon and the real CLI binary: the default profile exists at first
// start, create from YAML on stdin, edit from stdin (as lxc profile edit <
// file), launch with -p (repeatable) and --no-profiles, assign, the
// refusals (delete in use naming the instance, delete and rename of
// default), rename, delete.
func TestProfileCLI(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	// run runs the CLI with stdin and returns stdout, stderr and the error.
	run := func(stdin string, args ...string) (string, string, error) {
		cmd := exec.CommandContext(ctx, filepath.Join(binDir, "guestlink"), args...)
		cmd.Env = append(cleanEnv(), "GUESTLINK_STATE_DIR="+d.stateDir)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		return out.String(), errOut.String(), err
	}
	ok := func(stdin string, args ...string) string {
		t.Helper()
		out, errOut, err := run(stdin, args...)
		if err != nil {
			t.Fatalf("guestlink %s: %v\nstderr: %s", strings.Join(args, " "), err, errOut)
		}
		return out
	}
	fails := func(want string, args ...string) {
		t.Helper()
		_, errOut, err := run("", args...)
		if err == nil || !strings.Contains(errOut, want) {
			t.Fatalf("guestlink %s: err %v, stderr %q, want it to contain %q", strings.Join(args, " "), err, errOut, want)
		}
	}

	show := ok("", "profile", "show", "default")
	for _, want := range []string{"eth0:", "nictype: user", "root:", "path: /"} {
		if !strings.Contains(show, want) {
			t.Fatalf("profile show default lacks %q:\n%s", want, show)
		}
	}
	ok("config:\n  user.tier: web\ndevices: {}\n", "profile", "create", "web", "--description", "web tier")
	// edit reads the whole profile from stdin when it is not a terminal.
	ok("description: web tier\nconfig:\n  user.tier: web2\n  user.site: a\ndevices: {}\n", "profile", "edit", "web")
	var web api.Profile
	if err := json.Unmarshal([]byte(ok("", "profile", "show", "web", "--format", "json")), &web); err != nil {
		t.Fatal(err)
	}
	if web.Config["user.tier"] != "web2" || web.Config["user.site"] != "a" || web.Description != "web tier" {
		t.Fatalf("web after edit: %+v", web)
	}
	fails("no profile given", "profile", "edit", "web") // empty stdin
	if _, errOut, err := run("colour: red\n", "profile", "edit", "web"); err == nil || !strings.Contains(errOut, "colour") {
		t.Fatalf("edit with an unknown field: %v %q", err, errOut)
	}

	ok("", "launch", "w1", "--backend", "sim", "-p", "default", "-p", "web")
	ok("", "launch", "w2", "--backend", "sim", "--no-profiles")
	ok("", "launch", "w3", "--backend", "sim")
	for name, want := range map[string]string{"w1": "default,web", "w2": "", "w3": "default"} {
		inst, err := d.client.Instance(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(inst.Profiles, ","); got != want {
			t.Errorf("%s profiles = %q, want %q", name, got, want)
		}
	}
	if info := ok("", "info", "w1"); !strings.Contains(info, "default, web") {
		t.Fatalf("info w1 does not list its profiles:\n%s", info)
	}
	fails("--no-profiles and -p cannot be given together", "launch", "w4", "--backend", "sim", "--no-profiles", "-p", "web")
	fails(`profile "nope"`, "launch", "w4", "--backend", "sim", "-p", "nope")

	fails("used by instances w1", "profile", "delete", "web")
	fails(`the "default" profile cannot be deleted`, "profile", "delete", "default")
	fails(`the "default" profile cannot be renamed`, "profile", "rename", "default", "d2")
	list := ok("", "profile", "list")
	if !strings.Contains(list, "web tier") || !strings.Contains(list, "default") {
		t.Fatalf("profile list:\n%s", list)
	}
	ok("", "profile", "rename", "web", "site")
	if inst, _ := d.client.Instance(ctx, "w1"); strings.Join(inst.Profiles, ",") != "default,site" {
		t.Fatalf("w1 after the rename: %v", inst.Profiles)
	}
	ok("", "profile", "assign", "w1", "default")
	ok("", "profile", "delete", "site")
	fails(`"site"`, "profile", "show", "site")
}
