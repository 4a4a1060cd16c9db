package adminapi_test

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"testing"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/storage"
	"github.com/guestlink/guestlink/db/dbtest"
	"github.com/guestlink/guestlink/transport/adminapi/apitest"
)

// TestAuthAndStorageAnswersKeepWireNames asks the real API (the real auth
// service and the real dir pool, both over SQLite) for each object whose
// domain type lost its JSON tags (core/auth's Certificate, Identity and
// Session, core/storage's Pool and Volume) and checks that the answer's
// keys are exactly the api type's names, the ones the domain's tags gave:
// a route that answered the domain value itself would now send Go's field
// names ("Name", "AddedAt") and fail here.
func TestAuthAndStorageAnswersKeepWireNames(t *testing.T) {
	ctx := context.Background()
	st, err := storage.New(t.TempDir(), dbtest.SQLite(t).(storage.Store), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := apitest.NewServer(t, apitest.Options{Auth: true, Storage: st})
	_, certPEM := keyPair(t, "alice")
	certJSON, _ := json.Marshal(api.CertificatesPost{Name: "alice", Certificate: string(certPEM)})
	for _, step := range []struct{ method, path, body string }{
		{"POST", "/1.0/certificates", string(certJSON)},
		{"POST", "/1.0/auth/identities/bearer", `{"name":"ci"}`},
		{"POST", "/1.0/auth/identities/bearer/ci/token", `{"expiry":"24h"}`},
		{"POST", "/1.0/storage-pools/default/volumes/custom", `{"name":"vol1","content_type":"block","config":{"size":"1MiB"}}`},
		{"POST", "/1.0/storage-pools/default/volumes/custom/vol1/snapshots", `{"name":"snap0"}`},
	} {
		if code, env := call(t, srv, step.method, step.path, step.body); code/100 != 2 {
			t.Fatalf("%s %s: %d %s", step.method, step.path, code, env.Error)
		}
	}
	login, _, err := srv.Auth.NewLogin(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := srv.Auth.Redeem(ctx, login); err != nil {
		t.Fatal(err)
	}
	var fp string
	{
		_, env := call(t, srv, "GET", "/1.0/certificates", "")
		var list []api.Certificate
		if err := json.Unmarshal(env.Metadata, &list); err != nil || len(list) != 1 {
			t.Fatalf("certificates = %s (%v)", env.Metadata, err)
		}
		fp = list[0].Fingerprint
	}

	certificate := []string{"added_at", "added_by", "certificate", "fingerprint", "name", "role", "type"}
	identity := []string{"created_at", "created_by", "has_token", "id", "instances", "name", "role", "token_expires_at", "token_issued_at", "type"}
	session := []string{"created_at", "created_by", "expires_at", "id", "name"}
	pool := []string{"description", "driver", "name", "source", "status"}
	volume := []string{"config", "content_type", "created_at", "description", "location", "name", "pool", "type"}
	// omitted are the api type's omitempty names: an object may lack them
	// (a tls identity has no token, a bearer one no instances).
	omitted := []string{"instances", "role", "token_expires_at", "token_issued_at"}
	tokens := 0
	for _, tt := range []struct {
		path string
		list bool
		keys []string
	}{
		{"/1.0/certificates", true, certificate},
		{"/1.0/certificates/" + fp, false, certificate},
		{"/1.0/auth/identities", true, identity},
		{"/1.0/auth/sessions", true, session},
		{"/1.0/storage-pools", true, pool},
		{"/1.0/storage-pools/default", false, pool},
		{"/1.0/storage-pools/default/volumes/custom", true, volume},
		{"/1.0/storage-pools/default/volumes/custom/vol1", false, volume},
		{"/1.0/storage-pools/default/volumes/custom/vol1/snapshots", true, volume},
		{"/1.0/storage-pools/default/volumes/custom/vol1/snapshots/snap0", false, volume},
	} {
		t.Run(tt.path, func(t *testing.T) {
			code, env := call(t, srv, "GET", tt.path, "")
			if code != 200 {
				t.Fatalf("%d %s", code, env.Error)
			}
			var objs []map[string]json.RawMessage
			if tt.list {
				if err := json.Unmarshal(env.Metadata, &objs); err != nil || len(objs) == 0 {
					t.Fatalf("want a non-empty list, got %s (%v)", env.Metadata, err)
				}
			} else {
				var obj map[string]json.RawMessage
				if err := json.Unmarshal(env.Metadata, &obj); err != nil {
					t.Fatalf("want an object, got %s (%v)", env.Metadata, err)
				}
				objs = append(objs, obj)
			}
			for _, obj := range objs {
				got := slices.Sorted(maps.Keys(obj))
				for _, k := range got {
					if !slices.Contains(tt.keys, k) {
						t.Errorf("key %q in %q is none of the api type's JSON names %q", k, got, tt.keys)
					}
				}
				for _, k := range tt.keys {
					if _, ok := obj[k]; !ok && !slices.Contains(omitted, k) {
						t.Errorf("key %q missing from %q", k, got)
					}
				}
				if _, ok := obj["token_expires_at"]; ok {
					tokens++
				}
			}
		})
	}
	if tokens != 1 {
		t.Errorf("%d identities answered token_expires_at, want 1 (bearer/ci's token)", tokens)
	}
}
