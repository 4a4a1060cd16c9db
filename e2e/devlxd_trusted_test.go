package e2e

import (
	"context"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/internal/devlxdconf"
	"github.com/guestlink/guestlink/internal/testwait"
)

// TestDevlxdTrusted checks the trusted devlxd API end to end: a devlxd
// identity made on the host with the admin API, its token sent by a guest
// through the real agent's /dev/lxd/sock, the host checking the token and
// that the calling guest is in the token's scope.
func TestDevlxdTrusted(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	mgmt := map[string]string{"security.devlxd.management.volumes": "true"}
	g1 := d.launch(ctx, "trusted1", mgmt, nil)
	g2 := d.launch(ctx, "trusted2", mgmt, nil)

	if _, err := d.client.CreateStorageVolume(ctx, "default", api.StorageVolumesPost{Name: "admin-vol", Config: map[string]string{"size": "1MiB"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.client.CreateDevlxdIdentity(ctx, "csi", []string{"trusted1"}); err != nil {
		t.Fatal(err)
	}
	tok, err := d.client.IssueDevlxdToken(ctx, "csi", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.client.CreateBearerIdentity(ctx, "admin"); err != nil {
		t.Fatal(err)
	}
	admin, err := d.client.IssueToken(ctx, "admin", "")
	if err != nil {
		t.Fatal(err)
	}
	bearer := "Authorization: Bearer " + tok.Token
	const (
		text = "text/plain; charset=utf-8"
		js   = "application/json"
	)
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	inst1, err := d.client.Instance(ctx, "trusted1")
	if err != nil {
		t.Fatal(err)
	}
	metaData := "instance-id: " + inst1.UUID + "\nlocal-hostname: trusted1\n"
	// A sim guest is a process: its backend declares instance_type "container".
	// GET /1.0 from the record of LXD's field order (devlxdconf).
	sim := devlxdconf.Guest{Location: host, InstanceType: "container"}
	untrusted := devlxdconf.Info(sim, "Started") + "\n"
	trusted := devlxdconf.TrustedInfo(sim, "Started") + "\n"
	for _, tc := range []struct {
		name, socket, method, path string
		headers                    []string
		status                     int
		ctype, body                string
	}{
		{"no token: untrusted", g1.socket, "GET", "/1.0", nil, 200, js, untrusted},
		{"token: trusted", g1.socket, "GET", "/1.0", []string{bearer}, 200, js, trusted},
		{"no token: management refused", g1.socket, "GET", "/1.0/instances/trusted1", nil, 403, text, "You must be authenticated\n"},
		{"no token: volumes refused", g1.socket, "GET", "/1.0/storage-pools/default/volumes", nil, 403, text, "You must be authenticated\n"},
		{"token: own instance", g1.socket, "GET", "/1.0/instances/trusted1", []string{bearer}, 200, js, `{"name":"trusted1","devices":{}}` + "\n"},
		{"token: instance outside scope", g1.socket, "GET", "/1.0/instances/trusted2", []string{bearer}, 404, text, "Not Found\n"},
		{"token from another guest", g2.socket, "GET", "/1.0", []string{bearer}, 403, text, `Failed verifying bearer token: identity devlxd/csi may not act for instance "trusted2"` + "\n"},
		// Not a devlxd token: served as untrusted, as LXD (not locked out).
		{"admin API token: untrusted", g1.socket, "GET", "/1.0", []string{"Authorization: Bearer " + admin.Token}, 200, js, untrusted},
		{"admin API token: meta-data", g1.socket, "GET", "/1.0/meta-data", []string{"Authorization: Bearer " + admin.Token}, 200, "application/octet-stream", metaData},
		{"admin API token: config", g1.socket, "GET", "/1.0/config", []string{"Authorization: Bearer " + admin.Token}, 200, js, "[]\n"},
		{"admin API token: management refused", g1.socket, "GET", "/1.0/instances/trusted1", []string{"Authorization: Bearer " + admin.Token}, 403, text, "You must be authenticated\n"},
		{"random bearer: meta-data", g1.socket, "GET", "/1.0/meta-data", []string{"Authorization: Bearer 3q2+7w=="}, 200, "application/octet-stream", metaData},
		{"random bearer: config", g1.socket, "GET", "/1.0/config", []string{"Authorization: Bearer 3q2+7w=="}, 200, js, "[]\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := curlDevlxd(ctx, t, tc.socket, tc.method, tc.path, "", tc.headers...)
			if got.status != tc.status || got.contentType != tc.ctype || string(got.body) != tc.body {
				t.Fatalf("%s %s: got %d %q %q, want %d %q %q", tc.method, tc.path, got.status, got.contentType, got.body, tc.status, tc.ctype, tc.body)
			}
		})
	}

	// Volumes through devlxd: created by the guest, owned by its identity.
	opRE := regexp.MustCompile(`^\{"id":"([0-9a-f-]{36})","status":"Success","status_code":200,"err":""\}\n$`)
	got := curlDevlxd(ctx, t, g1.socket, "POST", "/1.0/storage-pools/default/volumes/custom", `{"name":"csi-vol","type":"custom","config":{"size":"8MiB"}}`, bearer)
	m := opRE.FindStringSubmatch(string(got.body))
	if got.status != 200 || m == nil {
		t.Fatalf("volume create: %d %q", got.status, got.body)
	}
	if got := curlDevlxd(ctx, t, g1.socket, "GET", "/1.0/operations/"+m[1]+"/wait?timeout=30", "", bearer); got.status != 200 || !opRE.Match(got.body) {
		t.Fatalf("operation wait: %d %q", got.status, got.body)
	}
	if got := curlDevlxd(ctx, t, g2.socket, "GET", "/1.0/operations/"+m[1]+"/wait", ""); got.status != 403 {
		t.Fatalf("operation wait untrusted: %d %q", got.status, got.body)
	}
	vol, err := d.client.StorageVolume(ctx, "default", "csi-vol")
	if err != nil || vol.Config["volatile.devlxd.owner"] != "devlxd/csi" {
		t.Fatalf("host view of the volume: %+v %v", vol, err)
	}
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		want                     string
	}{
		{"list", "GET", "/1.0/storage-pools/default/volumes?recursion=1", "", 200, `[{"name":"csi-vol","description":"","pool":"default","type":"custom","content_type":"block","config":{"size":"8MiB","volatile.devlxd.owner":"devlxd/csi"},"location":"none"}]` + "\n"},
		{"list not recursive", "GET", "/1.0/storage-pools/default/volumes", "", 501, "Only recursive requests are currently supported\n"},
		{"get", "GET", "/1.0/storage-pools/default/volumes/custom/csi-vol", "", 200, `{"name":"csi-vol","description":"","pool":"default","type":"custom","content_type":"block","config":{"size":"8MiB","volatile.devlxd.owner":"devlxd/csi"},"location":"none"}` + "\n"},
		{"pool", "GET", "/1.0/storage-pools/default", "", 200, `{"name":"default","driver":"dir","status":"Created"}` + "\n"},
		{"not custom", "POST", "/1.0/storage-pools/default/volumes", `{"name":"x","type":"container"}`, 400, "Only custom storage volumes can be created\n"},
		{"owner", "POST", "/1.0/storage-pools/default/volumes/custom", `{"name":"x","type":"custom","config":{"volatile.devlxd.owner":"devlxd/other"}}`, 400, "Volume owner cannot be changed\n"},
		{"bad body", "POST", "/1.0/storage-pools/default/volumes/custom", `{`, 400, "Failed decoding request body: unexpected EOF\n"},
		{"snapshot", "POST", "/1.0/storage-pools/default/volumes/custom/csi-vol/snapshots", `{"name":"s0"}`, 200, ""},
		{"snapshots", "GET", "/1.0/storage-pools/default/volumes/custom/csi-vol/snapshots?recursion=1", "", 200, `[{"name":"s0","description":"","content_type":"block","config":{"size":"8MiB","volatile.devlxd.owner":"devlxd/csi"}}]` + "\n"},
		{"snapshot delete", "DELETE", "/1.0/storage-pools/default/volumes/custom/csi-vol/snapshots/s0", "", 200, ""},
		{"another identity's volume is not shown", "GET", "/1.0/storage-pools/default/volumes/custom/admin-vol", "", 404, "Not Found\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := curlDevlxd(ctx, t, g1.socket, tc.method, tc.path, tc.body, bearer)
			if got.status != tc.status || (tc.want != "" && string(got.body) != tc.want) || (tc.want == "" && !opRE.Match(got.body)) {
				t.Fatalf("%s %s: %d %q, want %d %q", tc.method, tc.path, got.status, got.body, tc.status, tc.want)
			}
		})
	}
	// Attaching to a running sim guest: sim cannot hot-plug, said precisely.
	got = curlDevlxd(ctx, t, g1.socket, "PATCH", "/1.0/instances/trusted1", `{"devices":{"csi-vol":{"type":"disk","pool":"default","source":"csi-vol"}}}`, bearer)
	if want := `updating devices of instance "trusted1": backend sim cannot hot-plug devices; stop the instance first: conflict` + "\n"; got.status != 409 || string(got.body) != want {
		t.Fatalf("attach on sim: %d %q, want 409 %q", got.status, got.body, want)
	}
	got = curlDevlxd(ctx, t, g1.socket, "PATCH", "/1.0/instances/trusted1", `{"devices":{"d":{"type":"disk","pool":"default","source":"admin-vol"}}}`, bearer)
	if got.status != 403 || string(got.body) != "Not authorized to use storage volume \"admin-vol\"\n" {
		t.Fatalf("attach of a volume not owned: %d %q", got.status, got.body)
	}

	// A devlxd token may expire after seconds, as LXD's: issued for 2 s it
	// is trusted, then refused with LXD's expiry text once it has expired.
	short, err := d.client.IssueDevlxdToken(ctx, "csi", "2s")
	if err != nil {
		t.Fatalf("issuing a 2s devlxd token: %v", err)
	}
	if short.ExpiresAt == nil || time.Until(*short.ExpiresAt) > 2*time.Second {
		t.Fatalf("2s token expires at %v", short.ExpiresAt)
	}
	shortBearer := "Authorization: Bearer " + short.Token
	if got := curlDevlxd(ctx, t, g1.socket, "GET", "/1.0", "", shortBearer); got.status != 200 || string(got.body) != trusted {
		t.Fatalf("fresh 2s token: %d %q", got.status, got.body)
	}
	const expired = "Failed verifying bearer token: Failed authenticating bearer token: Token is not valid: token has invalid claims: token is expired\n"
	testwait.For(t, "the 2s token to expire", 30*time.Second, func() bool {
		return string(curlDevlxd(ctx, t, g1.socket, "GET", "/1.0/meta-data", "", shortBearer).body) == expired
	})
	if time.Now().Before(*short.ExpiresAt) {
		t.Fatalf("refused as expired before its expiry %v", short.ExpiresAt)
	}
	bearer = shortBearer

	// Revoked: the guest's token no longer verifies.
	if err := d.client.RevokeDevlxdToken(ctx, "csi"); err != nil {
		t.Fatal(err)
	}
	got = curlDevlxd(ctx, t, g1.socket, "GET", "/1.0", "", bearer)
	if got.status != 403 || string(got.body) != "Failed verifying bearer token: Unrecognized token subject: No secret found for bearer token identity\n" {
		t.Fatalf("revoked token: %d %q", got.status, got.body)
	}
}
