package cluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"errors"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/errdefs"
)

func TestParseToken(t *testing.T) {
	good := joinToken{Name: "b", Addresses: []string{"127.0.0.1:8444"}, CA: strings.Repeat("ab", 32), Secret: "s3cret"}
	for _, tc := range []struct {
		name, text, want string
	}{
		{"round trip", good.encode(), ""},
		{"round trip with spaces", "  " + good.encode() + "\n", ""},
		{"no prefix", "abc", "not a join token"},
		{"a bearer token", "glb_abc", "not a join token"},
		{"not base64", "glj_!!!", "damaged (not base64url)"},
		{"not JSON", "glj_" + "bm90IGpzb24", "damaged"},
		{"incomplete", joinToken{Name: "b"}.encode(), "incomplete"},
		{"short CA fingerprint", joinToken{Name: "b", Addresses: []string{"x:1"}, CA: "ab", Secret: "s"}.encode(), "incomplete"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseToken(tc.text)
			if tc.want == "" {
				if err != nil || got.Name != "b" || got.Secret != "s3cret" || got.CA != good.CA {
					t.Fatalf("parseToken = %+v, %v", got, err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("parseToken(%q) = %v, want invalid %q", tc.text, err, tc.want)
			}
		})
	}
}

// newKeys makes a CA and a member certificate issued by it.
func newKeys(t *testing.T, name string) *keys {
	t.Helper()
	caPEM, caKeyPEM, err := newCA("test")
	if err != nil {
		t.Fatal(err)
	}
	k, err := parseCA(caPEM, caKeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	key, keyPEM, err := newMemberKey()
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := issue(k, name, "127.0.0.1:8444", &key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{}
	if err := c.setKeys(k, certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	return c.keys
}

func TestMemberCertificates(t *testing.T) {
	k := newKeys(t, "host1")
	leaf := k.leaf
	if leaf.Subject.CommonName != "host1" || len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "host1" {
		t.Errorf("member certificate names %q %v, want host1", leaf.Subject.CommonName, leaf.DNSNames)
	}
	if len(leaf.IPAddresses) != 1 || leaf.IPAddresses[0].String() != "127.0.0.1" {
		t.Errorf("member certificate IPs %v, want the cluster address's", leaf.IPAddresses)
	}
	if _, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok {
		t.Errorf("member key is %T", leaf.PublicKey)
	}
	pool := x509.NewCertPool()
	pool.AddCert(k.caCert)
	if err := verifyChain([][]byte{leaf.Raw}, pool); err != nil {
		t.Errorf("a member certificate of the CA: %v", err)
	}
	other := newKeys(t, "host1")
	if err := verifyChain([][]byte{other.leaf.Raw}, pool); err == nil {
		t.Error("a certificate of another cluster's CA was accepted")
	}
	if err := verifyChain(nil, pool); err == nil {
		t.Error("no certificate was accepted")
	}
}

func TestOpenWithoutPostgres(t *testing.T) {
	ctx := context.Background()
	c, err := Open(ctx, Config{StateDir: t.TempDir()})
	if c != nil || err != nil {
		t.Errorf("SQLite daemon: Open = %v, %v; want no cluster", c, err)
	}
	for _, cfg := range []Config{{Address: "127.0.0.1:1"}, {Join: "glj_x"}} {
		cfg.StateDir = t.TempDir()
		if _, err := Open(ctx, cfg); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "needs a PostgreSQL database") {
			t.Errorf("cluster flags on SQLite: %v", err)
		}
	}
	if _, err := Open(ctx, Config{Postgres: true, StateDir: t.TempDir(), HeartbeatInterval: 5e9, OfflineAfter: 1e9}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("offline timeout shorter than the heartbeat: %v", err)
	}
}
