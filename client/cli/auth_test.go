package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/client/cli"
	"github.com/guestlink/guestlink/transport/adminapi/apitest"
)

func TestAuthCommands(t *testing.T) {
	t.Setenv(cli.EnvConfigDir, t.TempDir())
	srv := apitest.NewServer(t, apitest.Options{Auth: true, DashboardURL: "http://127.0.0.1:8080"})

	ok(t, srv, "auth", "identity", "create", "bearer/ci")
	fails(t, srv, `invalid identity "ci": want bearer/NAME or devlxd/NAME: invalid argument`, "auth", "identity", "create", "ci")
	fails(t, srv, "identity bearer/ci already exists: already exists", "auth", "identity", "create", "bearer/ci")
	out := ok(t, srv, "auth", "identity", "token", "issue", "bearer/ci", "--expiry", "2h")
	if !regexp.MustCompile(`^glb_[A-Za-z0-9_-]{43}\n$`).MatchString(out) {
		t.Fatalf("token issue printed %q, want the token alone", out)
	}
	fails(t, srv, `invalid expiry "soon": want a duration such as 30m, 24h or 7d: invalid argument`,
		"auth", "identity", "token", "issue", "bearer/ci", "--expiry", "soon")
	list := ok(t, srv, "auth", "identity", "list")
	if strings.Contains(list, strings.TrimSpace(out)) || !strings.Contains(list, "bearer/ci") || !strings.Contains(list, "live") {
		t.Fatalf("identity list:\n%s", list)
	}
	ok(t, srv, "auth", "identity", "token", "revoke", "bearer/ci")
	if list := ok(t, srv, "auth", "identity", "list"); !strings.Contains(list, "none") {
		t.Fatalf("identity list after revoke:\n%s", list)
	}
	ok(t, srv, "auth", "identity", "delete", "bearer/ci")
	fails(t, srv, `deleting identity "ci": not found`, "auth", "identity", "delete", "bearer/ci")

	url := ok(t, srv, "dashboard", "--print-url")
	if !regexp.MustCompile(`^http://127\.0\.0\.1:8080/login\?token=gll_[A-Za-z0-9_-]{43}\n$`).MatchString(url) {
		t.Fatalf("dashboard --print-url printed %q", url)
	}
	// A redeemed login is a session the admin lists and revokes.
	token := strings.TrimPrefix(strings.TrimSpace(url), "http://127.0.0.1:8080/login?token=")
	if _, _, err := srv.Auth.Redeem(t.Context(), token); err != nil {
		t.Fatal(err)
	}
	var sessions []struct{ ID, Name string }
	if err := json.Unmarshal([]byte(ok(t, srv, "--format", "json", "auth", "session", "list")), &sessions); err != nil || len(sessions) != 1 {
		t.Fatalf("session list: %v %+v", err, sessions)
	}
	short := strings.TrimPrefix(sessions[0].Name, "session/")
	if !strings.Contains(ok(t, srv, "auth", "session", "list"), short) {
		t.Fatal("the table does not show the short id")
	}
	ok(t, srv, "auth", "session", "revoke", short)
	fails(t, srv, `session "`+short+`": not found`, "auth", "session", "revoke", short)
}

func TestDevlxdIdentityCommands(t *testing.T) {
	t.Setenv(cli.EnvConfigDir, t.TempDir())
	srv := apitest.NewServer(t, apitest.Options{Auth: true})

	fails(t, srv, "devlxd/csi: at least one --instance NAME is required (the instances it may act for): invalid argument",
		"auth", "identity", "create", "devlxd/csi")
	fails(t, srv, "--instance applies to devlxd identities only (bearer/csi is an admin API identity): invalid argument",
		"auth", "identity", "create", "bearer/csi", "--instance", "web1")
	fails(t, srv, `devlxd identity csi: invalid instance name "web_1": character '_' at position 3 is not a letter, digit or hyphen: invalid argument`,
		"auth", "identity", "create", "devlxd/csi", "--instance", "web_1")
	fails(t, srv, `invalid identity "other/csi": want bearer/NAME or devlxd/NAME: invalid argument`,
		"auth", "identity", "create", "other/csi")
	ok(t, srv, "auth", "identity", "create", "devlxd/csi", "--instance", "web1", "--instance", "web2")
	fails(t, srv, "identity devlxd/csi already exists: already exists", "auth", "identity", "create", "devlxd/csi", "--instance", "web1")
	out := ok(t, srv, "auth", "identity", "token", "issue", "devlxd/csi", "--expiry", "7d")
	if !regexp.MustCompile(`^gld_[A-Za-z0-9_-]{43}\n$`).MatchString(out) {
		t.Fatalf("token issue printed %q, want the devlxd token alone", out)
	}
	// A devlxd token does not open the admin API.
	if _, err := srv.Auth.AuthenticateToken(t.Context(), strings.TrimSpace(out)); err == nil {
		t.Fatal("a devlxd token authenticated on the admin API")
	}
	list := ok(t, srv, "auth", "identity", "list")
	if strings.Contains(list, strings.TrimSpace(out)) || !strings.Contains(list, "devlxd/csi") || !strings.Contains(list, "web1,web2") || !strings.Contains(list, "live") {
		t.Fatalf("identity list:\n%s", list)
	}
	ok(t, srv, "auth", "identity", "token", "revoke", "devlxd/csi")
	if list := ok(t, srv, "auth", "identity", "list"); !strings.Contains(list, "none") {
		t.Fatalf("identity list after revoke:\n%s", list)
	}
	ok(t, srv, "auth", "identity", "delete", "devlxd/csi")
	fails(t, srv, `deleting devlxd identity "csi": not found`, "auth", "identity", "delete", "devlxd/csi")
	fails(t, srv, `setting token of devlxd identity "csi": not found`, "auth", "identity", "token", "issue", "devlxd/csi")
}

func TestTrustCommands(t *testing.T) {
	t.Setenv(cli.EnvConfigDir, filepath.Join(t.TempDir(), "guestlink")) // made by the CLI
	srv := apitest.NewServer(t, apitest.Options{Auth: true})
	// remote add makes the client's key pair; trust it under a name.
	dir := os.Getenv(cli.EnvConfigDir)
	fails(t, srv, "an http remote needs a token, --token-file PATH or --token - (client certificates need https): invalid argument", "remote", "add", "x", "http://127.0.0.1:1")
	fails(t, srv, `invalid remote URL "ftp://h:1": want https://HOST:PORT or http://HOST:PORT: invalid argument`, "remote", "add", "x", "ftp://h:1")
	fails(t, srv, `remote name "local" is reserved for the local admin socket: invalid argument`, "remote", "add", "local", "http://h:1", "--token", "t")
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("glb_x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := ok(t, srv, "remote", "add", "x", "http://127.0.0.1:1", "--token-file", tokenFile)
	certPath := filepath.Join(dir, cli.ClientCertFile)
	if !strings.Contains(out, certPath) {
		t.Fatalf("remote add output lacks %s:\n%s", certPath, out)
	}
	for file, mode := range map[string]os.FileMode{cli.ClientKeyFile: 0o600, cli.RemotesFile: 0o600, ".": 0o700} {
		fi, err := os.Stat(filepath.Join(dir, file))
		if err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v (%v), want %v", file, fi.Mode().Perm(), err, mode)
		}
	}
	if list := ok(t, srv, "remote", "list"); !strings.Contains(list, "x ") || !strings.Contains(list, "local") {
		t.Fatalf("remote list:\n%s", list)
	}
	fails(t, srv, `remote "x" exists: remove it first: already exists`, "remote", "add", "x", "http://127.0.0.1:1", "--token", "t")
	ok(t, srv, "remote", "remove", "x")
	fails(t, srv, `no remote "x": see guestlink remote list: not found`, "--remote", "x", "list")

	out = ok(t, srv, "config", "trust", "add", certPath, "--name", "laptop")
	if !strings.HasPrefix(out, "Trusted laptop (") {
		t.Fatalf("trust add printed %q", out)
	}
	fails(t, srv, "reading certificate: open /nonexistent: no such file or directory", "config", "trust", "add", "/nonexistent")
	list := ok(t, srv, "config", "trust", "list")
	fp := regexp.MustCompile(`[0-9a-f]{64}`).FindString(list)
	if !strings.Contains(list, "laptop") || fp == "" {
		t.Fatalf("trust list:\n%s", list)
	}
	ok(t, srv, "config", "trust", "remove", fp)
	fails(t, srv, "deleting certificate "+fp+": not found", "config", "trust", "remove", fp)
	// config's own subcommands still work beside trust.
	fails(t, srv, `unknown config subcommand "nope": use get, set, unset or show`, "config", "nope")
}
