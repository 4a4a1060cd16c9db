package devlxd

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/guestlink/guestlink/core/auth"
	"github.com/guestlink/guestlink/errdefs"
)

// fakeTokens knows one token per identity and its scope.
type fakeTokens map[string]*auth.DevlxdCaller

func (f fakeTokens) AuthenticateDevlxd(_ context.Context, token, caller string) (*auth.DevlxdCaller, error) {
	who, ok := f[token]
	if !ok {
		return nil, fmt.Errorf("invalid devlxd token (unknown or revoked): %w", errdefs.ErrUnauthorized)
	}
	for _, in := range who.Instances {
		if in == caller {
			return who, nil
		}
	}
	return nil, fmt.Errorf("identity devlxd/%s may not act for instance %q: %w", who.Name, caller, errdefs.ErrForbidden)
}

func doBearer(t *testing.T, c *http.Client, method, path, token string) answer {
	t.Helper()
	req, err := http.NewRequest(method, "https://lxd"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header.Get("Content-Type"), string(body)}
}

func TestTrustedAuth(t *testing.T) {
	tokens := fakeTokens{
		"tok-a":  {Name: "csi", Instances: []string{"a"}},
		"tok-ab": {Name: "both", Instances: []string{"a", "b"}},
	}
	e := newEnv(t, func(c *Config) { c.Tokens = tokens })
	e.insts.setConfig(uuidA, KeyManagementVolumes, "true")
	e.insts.setConfig(uuidA, "volatile.root.devlxd.owner", "devlxd/csi")
	a := e.client(uuidA, e.agents["a"])
	b := e.client(uuidB, e.agents["b"])
	const untrusted = `{"api_version":"1.0","state":"Started","instance_type":"virtual-machine","location":"host1","auth":"untrusted","supported_storage_drivers":[]}`
	const trusted = `{"api_version":"1.0","state":"Started","instance_type":"virtual-machine","location":"host1","auth":"trusted","supported_storage_drivers":[],"environment":{"server_clustered":false}}`
	for _, tt := range []struct {
		name, method, path, token string
		c                         *http.Client
		want                      answer
	}{
		{"info untrusted", "GET", "/1.0", "", a, sync200(untrusted)},
		{"info trusted", "GET", "/1.0", "tok-a", a, sync200(trusted)},
		{"unknown token", "GET", "/1.0", "nope", a, fail(403, "Failed verifying bearer token: invalid devlxd token (unknown or revoked)")},
		{"token of another instance", "GET", "/1.0", "tok-a", b, fail(403, `Failed verifying bearer token: identity devlxd/csi may not act for instance "b"`)},
		{"untrusted management", "GET", "/1.0/instances/a", "", a, fail(403, "You must be authenticated")},
		{"untrusted volumes", "POST", "/1.0/storage-pools/default/volumes/custom", "", a, fail(403, "You must be authenticated")},
		{"untrusted operation wait", "GET", "/1.0/operations/x/wait", "", a, fail(403, "You must be authenticated")},
		{"untrusted method not served", "PUT", "/1.0/instances/a", "", a, fail(501, "Not Implemented")},
		{"non-standard method", "OPTIONS", "/1.0/instances/a", "", a, fail(404, `Method "OPTIONS" not found`)},
		{"trusted own instance", "GET", "/1.0/instances/a", "tok-a", a, sync200(`{"name":"a","devices":{"root":{"path":"/","pool":"default","type":"disk"}}}`)},
		{"trusted other identity owns nothing", "GET", "/1.0/instances/a", "tok-ab", a, sync200(`{"name":"a","devices":{}}`)},
		{"trusted instance outside scope", "GET", "/1.0/instances/b", "tok-a", a, fail(404, "Not Found")},
		{"trusted scope names a missing instance", "GET", "/1.0/instances/gone", "tok-a", a, fail(404, "Not Found")},
		{"management not enabled", "GET", "/1.0/instances/b", "tok-ab", b, fail(403, "Forbidden")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := doBearer(t, tt.c, tt.method, tt.path, tt.token); got != tt.want {
				t.Fatalf("%s %s:\n got %d %q %q\nwant %d %q %q", tt.method, tt.path, got.status, got.ctype, got.body, tt.want.status, tt.want.ctype, tt.want.body)
			}
		})
	}
}

func TestTrustedWithoutTokens(t *testing.T) {
	e := newEnv(t, nil)
	a := e.client(uuidA, e.agents["a"])
	want := fail(403, "Failed verifying bearer token: devlxd identities are not configured on this host")
	if got := doBearer(t, a, "GET", "/1.0", "tok"); got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}
