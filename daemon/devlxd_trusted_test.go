package daemon_test

import (
	"context"
	"os"
	"testing"
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
	untrusted := `{"api_version":"1.0","state":"Started","instance_type":"virtual-machine","location":"` + host + `","auth":"untrusted","supported_storage_drivers":[]}` + "\n"
	trusted := `{"api_version":"1.0","state":"Started","instance_type":"virtual-machine","location":"` + host + `","auth":"trusted","supported_storage_drivers":[],"environment":{"server_clustered":false}}` + "\n"
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
		{"admin API token on devlxd", g1.socket, "GET", "/1.0", []string{"Authorization: Bearer " + admin.Token}, 403, text, "Failed verifying bearer token: invalid devlxd token\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := curlDevlxd(ctx, t, tc.socket, tc.method, tc.path, "", tc.headers...)
			if got.status != tc.status || got.contentType != tc.ctype || string(got.body) != tc.body {
				t.Fatalf("%s %s: got %d %q %q, want %d %q %q", tc.method, tc.path, got.status, got.contentType, got.body, tc.status, tc.ctype, tc.body)
			}
		})
	}

	// Revoked: the guest's token no longer verifies.
	if err := d.client.RevokeDevlxdToken(ctx, "csi"); err != nil {
		t.Fatal(err)
	}
	got := curlDevlxd(ctx, t, g1.socket, "GET", "/1.0", "", bearer)
	if got.status != 403 || string(got.body) != "Failed verifying bearer token: invalid devlxd token (unknown or revoked)\n" {
		t.Fatalf("revoked token: %d %q", got.status, got.body)
	}
}
