package devlxd

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/core/auth"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/internal/devlxdconf"
)

// devlxdToken is a value of devlxd token form (auth.IsDevlxdToken) made
// of the character c.
func devlxdToken(c string) string { return auth.PrefixDevlxd + strings.Repeat(c, 43) }

// Tokens of fakeTokens: tokA and tokAB are identities', tokExpired has
// expired, tokUnknown is of devlxd form but nobody's.
var (
	tokA       = devlxdToken("a")
	tokAB      = devlxdToken("b")
	tokExpired = devlxdToken("e")
	tokUnknown = devlxdToken("u")
)

// fakeTokens knows one token per identity and its scope; tokExpired is
// refused as expired.
type fakeTokens map[string]*auth.DevlxdCaller

func (f fakeTokens) AuthenticateDevlxd(_ context.Context, token, caller string) (*auth.DevlxdCaller, error) {
	if token == tokExpired {
		return nil, fmt.Errorf("token of devlxd/old expired: %w: %w", auth.ErrDevlxdTokenExpired, errdefs.ErrUnauthorized)
	}
	who, ok := f[token]
	if !ok {
		return nil, fmt.Errorf("%w: %w", auth.ErrDevlxdTokenUnknown, errdefs.ErrUnauthorized)
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
		tokA:  {Name: "csi", Instances: []string{"a"}},
		tokAB: {Name: "both", Instances: []string{"a", "b"}},
	}
	e := newEnv(t, func(c *Config) { c.Tokens = tokens })
	e.insts.setConfig(uuidA, KeyManagementVolumes, "true")
	e.insts.setConfig(uuidA, "volatile.root.devlxd.owner", "devlxd/csi")
	a := e.client(uuidA, e.agents["a"])
	b := e.client(uuidB, e.agents["b"])
	// GET /1.0 from the record of LXD's field order (devlxdconf).
	vm := devlxdconf.Guest{Location: "host1", InstanceType: "virtual-machine"}
	untrusted := devlxdconf.Info(vm, "Started")
	trusted := devlxdconf.TrustedInfo(vm, "Started")
	for _, tt := range []struct {
		name, method, path, token string
		c                         *http.Client
		want                      answer
	}{
		{"info untrusted", "GET", "/1.0", "", a, sync200(untrusted)},
		{"info trusted", "GET", "/1.0", tokA, a, sync200(trusted)},
		{"unknown token", "GET", "/1.0", tokUnknown, a, fail(403, "Failed verifying bearer token: Unrecognized token subject: No secret found for bearer token identity")},
		{"unknown token on meta-data", "GET", "/1.0/meta-data", tokUnknown, a, fail(403, "Failed verifying bearer token: Unrecognized token subject: No secret found for bearer token identity")},
		{"expired token", "GET", "/1.0/config", tokExpired, a, fail(403, "Failed verifying bearer token: Failed authenticating bearer token: Token is not valid: token has invalid claims: token is expired")},
		{"token of another instance", "GET", "/1.0", tokA, b, fail(403, `Failed verifying bearer token: identity devlxd/csi may not act for instance "b"`)},
		{"foreign token on management", "GET", "/1.0/instances/a", "glb_" + strings.Repeat("x", 43), a, fail(403, "You must be authenticated")},
		{"untrusted management", "GET", "/1.0/instances/a", "", a, fail(403, "You must be authenticated")},
		{"untrusted volumes", "POST", "/1.0/storage-pools/default/volumes/custom", "", a, fail(403, "You must be authenticated")},
		{"untrusted operation wait", "GET", "/1.0/operations/x/wait", "", a, fail(403, "You must be authenticated")},
		{"untrusted method not served", "PUT", "/1.0/instances/a", "", a, fail(501, "Not Implemented")},
		{"non-standard method", "OPTIONS", "/1.0/instances/a", "", a, fail(404, `Method "OPTIONS" not found`)},
		{"trusted own instance", "GET", "/1.0/instances/a", tokA, a, sync200(`{"name":"a","devices":{"root":{"path":"/","pool":"default","type":"disk"}}}`)},
		{"trusted other identity owns nothing", "GET", "/1.0/instances/a", tokAB, a, sync200(`{"name":"a","devices":{}}`)},
		{"trusted instance outside scope", "GET", "/1.0/instances/b", tokA, a, fail(404, "Not Found")},
		{"trusted scope names a missing instance", "GET", "/1.0/instances/gone", tokA, a, fail(404, "Not Found")},
		{"management not enabled", "GET", "/1.0/instances/b", tokAB, b, fail(403, "Forbidden")},
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
	want := fail(403, "Failed verifying bearer token: Unrecognized token subject: No secret found for bearer token identity")
	if got := doBearer(t, a, "GET", "/1.0", tokA); got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

// TestForeignBearerIsUntrusted checks LXD's rule for bearer values that are
// not devlxd tokens: the caller is served exactly as without the header on
// every untrusted route (meta-data and config included), and trusted-only
// routes answer 403 "You must be authenticated". Tried: an admin API token,
// random bytes, a JWT, an empty value, lowercase "bearer" before a devlxd
// token, a devlxd token after two spaces, and another auth scheme.
func TestForeignBearerIsUntrusted(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Tokens = fakeTokens{tokA: {Name: "csi", Instances: []string{"a"}}} })
	e.insts.setConfig(uuidA, KeyManagementVolumes, "true")
	e.insts.setConfig(uuidA, "user.meta-data", "foo: bar")
	e.insts.setConfig(uuidA, "user.x", "y")
	a := e.client(uuidA, e.agents["a"])
	authorizations := map[string]string{
		"admin API token": "Bearer glb_" + strings.Repeat("Q", 43),
		"random bytes":    "Bearer q8Zp0v-_~!%+/=\x8f\xfe",
		"a JWT":           "Bearer eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ4IiwiaXNzIjoibHhkOngifQ.c2lnbmF0dXJl",
		"empty bearer":    "Bearer ",
		"lowercase":       "bearer " + tokA,
		"two spaces":      "Bearer  " + tokA,
		"basic":           "Basic dXNlcjpwYXNz",
	}
	for _, path := range []string{"/1.0", "/1.0/meta-data", "/1.0/config", "/1.0/config/user.x", "/1.0/devices", "/"} {
		want := doHeader(t, a, "GET", path, "")
		if want.status != http.StatusOK {
			t.Fatalf("GET %s without a token: %+v", path, want)
		}
		for name, h := range authorizations {
			t.Run(name+" "+path, func(t *testing.T) {
				if got := doHeader(t, a, "GET", path, h); got != want {
					t.Fatalf("GET %s with %s: got %+v, want as without a token %+v", path, name, got, want)
				}
			})
		}
	}
	for name, h := range authorizations {
		if got, want := doHeader(t, a, "GET", "/1.0/instances/a", h), fail(403, "You must be authenticated"); got != want {
			t.Errorf("GET /1.0/instances/a with %s: got %+v, want %+v", name, got, want)
		}
	}
}

// doHeader sends a request with the Authorization header h (none if
// empty).
func doHeader(t *testing.T, c *http.Client, method, path, h string) answer {
	t.Helper()
	req, err := http.NewRequest(method, "https://lxd"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if h != "" {
		req.Header.Set("Authorization", h)
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
