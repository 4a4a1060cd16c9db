package auth_test

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/guestlink/guestlink/internal/testcert"

	"github.com/guestlink/guestlink/core/auth"
	"github.com/guestlink/guestlink/db"
	"github.com/guestlink/guestlink/errdefs"
)

// SessionService is the interface the dashboard builds its login against;
// *auth.Service must satisfy it exactly.
type SessionService interface {
	Redeem(ctx context.Context, loginToken string) (sessionID string, expires time.Time, err error)
	Validate(ctx context.Context, sessionID string) (who string, err error)
	Revoke(ctx context.Context, sessionID string) error
}

var _ SessionService = (*auth.Service)(nil)

// clock is a settable fake clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// newService returns a service over a fresh SQLite store and its clock.
func newService(t *testing.T, maxLogins int) (*auth.Service, auth.Store, *clock) {
	t.Helper()
	st, err := db.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "auth.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	clk := &clock{t: time.Now()}
	svc, err := auth.New(auth.Config{Store: st.(auth.Store), Now: clk.now, MaxLoginTokens: maxLogins})
	if err != nil {
		t.Fatal(err)
	}
	return svc, st.(auth.Store), clk
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestBearerTokens(t *testing.T) {
	ctx := context.Background()
	svc, st, clk := newService(t, 0)
	if _, err := svc.CreateIdentity(ctx, "ci", "test", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.CreateIdentity(ctx, "ci", "test", ""); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("second create: %v, want already exists", err)
	}
	// An identity without a token authenticates nothing.
	tok, exp, err := svc.IssueToken(ctx, "ci", time.Hour)
	if err != nil || exp == nil {
		t.Fatalf("IssueToken = %q, %v, %v", tok, exp, err)
	}
	if !strings.HasPrefix(tok, auth.PrefixBearer) || len(tok) != len(auth.PrefixBearer)+43 {
		t.Fatalf("token %q: want glb_ and 43 base64url characters (256 bits)", tok)
	}
	// Stored only as its SHA-256.
	row, err := st.Identity(ctx, "ci")
	if err != nil {
		t.Fatal(err)
	}
	if row.TokenHash != sha(tok) || strings.Contains(row.TokenHash, tok[4:]) {
		t.Fatalf("stored token hash %q, want sha256 of the token", row.TokenHash)
	}
	if id, err := svc.AuthenticateToken(ctx, tok); err != nil || id.Name != "ci" || id.ID != "bearer/ci" || id.Role != auth.RoleAdmin {
		t.Fatalf("AuthenticateToken = %+v, %v", id, err)
	}
	for _, tt := range []struct{ name, token string }{
		{"empty", ""},
		{"garbage", "hello"},
		{"wrong prefix", "gls_" + tok[4:]},
		{"unknown", auth.PrefixBearer + strings.Repeat("A", 43)},
		{"one character off", tok[:len(tok)-1] + string(rune(tok[len(tok)-1])^1)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := svc.AuthenticateToken(ctx, tt.token); !errors.Is(err, errdefs.ErrUnauthorized) {
				t.Fatalf("AuthenticateToken(%q) = %v, want unauthorized", tt.token, err)
			}
		})
	}
	// Issuing again replaces the token.
	tok2, _, err := svc.IssueToken(ctx, "ci", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.AuthenticateToken(ctx, tok); !errors.Is(err, errdefs.ErrUnauthorized) {
		t.Fatalf("replaced token still works: %v", err)
	}
	if _, err := svc.AuthenticateToken(ctx, tok2); err != nil {
		t.Fatalf("new token: %v", err)
	}
	// Revoked.
	if err := svc.RevokeToken(ctx, "ci"); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.AuthenticateToken(ctx, tok2); !errors.Is(err, errdefs.ErrUnauthorized) {
		t.Fatalf("revoked token works: %v", err)
	}
	// Expired.
	tok3, _, err := svc.IssueToken(ctx, "ci", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	clk.add(time.Minute)
	if _, err := svc.AuthenticateToken(ctx, tok3); !errors.Is(err, errdefs.ErrUnauthorized) {
		t.Fatalf("expired token works: %v", err)
	}
	// Deleted identities lose their token.
	tok4, _, _ := svc.IssueToken(ctx, "ci", 0)
	if err := svc.DeleteIdentity(ctx, "ci"); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.AuthenticateToken(ctx, tok4); !errors.Is(err, errdefs.ErrUnauthorized) {
		t.Fatalf("token of a deleted identity works: %v", err)
	}
	if _, _, err := svc.IssueToken(ctx, "ci", 0); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("token for a deleted identity: %v, want not found", err)
	}
}

func TestParseExpiry(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", 0, true},
		{"24h", 24 * time.Hour, true},
		{"90m", 90 * time.Minute, true},
		{"7d", 7 * 24 * time.Hour, true},
		{"30s", 0, false},
		{"-1h", 0, false},
		{"1y", 0, false},
		{"99999d", 0, false},
		{"d", 0, false},
	} {
		t.Run(tt.in, func(t *testing.T) {
			got, err := auth.ParseExpiry(tt.in)
			if (err == nil) != tt.ok || got != tt.want {
				t.Fatalf("ParseExpiry(%q) = %v, %v", tt.in, got, err)
			}
			if err != nil && !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("error %v is not invalid-argument", err)
			}
		})
	}
}

func TestValidateName(t *testing.T) {
	for _, tt := range []struct {
		name string
		ok   bool
	}{
		{"ci", true}, {"ci-bot-2", true}, {"", false}, {"1ci", false}, {"-ci", false}, {"ci-", false},
		{"ci/x", false}, {"ci bot", false}, {strings.Repeat("a", 64), false}, {"é", false},
	} {
		if err := auth.ValidateName(tt.name); (err == nil) != tt.ok {
			t.Errorf("ValidateName(%q) = %v", tt.name, err)
		}
	}
}

func TestDashboardLogins(t *testing.T) {
	ctx := context.Background()
	svc, st, clk := newService(t, 3)
	login, exp, err := svc.NewLogin(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	if d := exp.Sub(clk.now()); d < auth.DefaultLoginTTL-time.Second || d > auth.DefaultLoginTTL {
		t.Fatalf("login expires in %v, want %v", d, auth.DefaultLoginTTL)
	}
	sid, sexp, err := svc.Redeem(ctx, login)
	if err != nil {
		t.Fatal(err)
	}
	if d := sexp.Sub(clk.now()); d < auth.DefaultSessionTTL-time.Second || d > auth.DefaultSessionTTL {
		t.Fatalf("session expires in %v, want %v", d, auth.DefaultSessionTTL)
	}
	// One time only.
	if _, _, err := svc.Redeem(ctx, login); !errors.Is(err, errdefs.ErrUnauthorized) {
		t.Fatalf("second Redeem = %v, want unauthorized", err)
	}
	who, err := svc.Validate(ctx, sid)
	if err != nil || who != "session/"+sha(sid)[:8] {
		t.Fatalf("Validate = %q, %v; want session/%s", who, err, sha(sid)[:8])
	}
	// Stored hashed.
	if _, err := st.SessionByHash(ctx, sha(sid)); err != nil {
		t.Fatalf("session row by hash: %v", err)
	}
	list, err := svc.Sessions(ctx)
	if err != nil || len(list) != 1 || list[0].ID != sha(sid) || list[0].CreatedBy != "test" {
		t.Fatalf("Sessions = %+v, %v", list, err)
	}
	for _, bad := range []string{"", "x", "gls_" + strings.Repeat("A", 43), login} {
		if _, err := svc.Validate(ctx, bad); !errors.Is(err, errdefs.ErrUnauthorized) {
			t.Errorf("Validate(%q) = %v, want unauthorized", bad, err)
		}
	}
	// Revoke by the listed id's prefix, then it is gone.
	if err := svc.RevokeSession(ctx, list[0].Name); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Validate(ctx, sid); !errors.Is(err, errdefs.ErrUnauthorized) {
		t.Fatalf("revoked session validates: %v", err)
	}
	if err := svc.RevokeSession(ctx, list[0].ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("revoking again = %v, want not found", err)
	}
	if err := svc.RevokeSession(ctx, "abc"); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("short id = %v, want invalid", err)
	}

	// Revoke by the session id (the dashboard's logout).
	l2, _, _ := svc.NewLogin(ctx, "test")
	sid2, _, err := svc.Redeem(ctx, l2)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Revoke(ctx, sid2); err != nil {
		t.Fatal(err)
	}
	if err := svc.Revoke(ctx, sid2); !errors.Is(err, errdefs.ErrUnauthorized) {
		t.Fatalf("second Revoke = %v, want unauthorized", err)
	}

	// Sessions and login tokens expire, and Purge removes them.
	l3, _, _ := svc.NewLogin(ctx, "test")
	sid3, _, _ := svc.Redeem(ctx, l3)
	stale, _, _ := svc.NewLogin(ctx, "test")
	clk.add(auth.DefaultLoginTTL)
	if _, _, err := svc.Redeem(ctx, stale); !errors.Is(err, errdefs.ErrUnauthorized) {
		t.Fatalf("expired login redeemed: %v", err)
	}
	clk.add(auth.DefaultSessionTTL)
	if _, err := svc.Validate(ctx, sid3); !errors.Is(err, errdefs.ErrUnauthorized) {
		t.Fatalf("expired session validates: %v", err)
	}
	if n, err := svc.Purge(ctx); err != nil || n != 2 {
		t.Fatalf("Purge = %d, %v; want the expired login and session", n, err)
	}
}

func TestLoginCap(t *testing.T) {
	ctx := context.Background()
	svc, _, clk := newService(t, 3)
	for range 3 {
		if _, _, err := svc.NewLogin(ctx, "test"); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := svc.NewLogin(ctx, "test"); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("fourth live login = %v, want conflict", err)
	}
	// Expired ones do not count.
	clk.add(auth.DefaultLoginTTL)
	if _, _, err := svc.NewLogin(ctx, "test"); err != nil {
		t.Fatalf("login after the others expired: %v", err)
	}
}

// newCert returns a self-signed certificate in PEM, valid from nb to na.
func newCert(t *testing.T, cn string, nb, na time.Time) (*x509.Certificate, []byte) {
	t.Helper()
	p := testcert.NewWith(t, cn, testcert.Options{NotBefore: nb, NotAfter: na, Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return p.Cert, p.CertPEM
}

func TestCertificates(t *testing.T) {
	ctx := context.Background()
	svc, _, clk := newService(t, 0)
	now := clk.now()
	cert, pemData := newCert(t, "alice-laptop", now.Add(-time.Hour), now.Add(time.Hour))
	other, _ := newCert(t, "mallory", now.Add(-time.Hour), now.Add(time.Hour))
	_, expired := newCert(t, "old", now.Add(-2*time.Hour), now.Add(-time.Hour))

	for _, tt := range []struct {
		name string
		data []byte
		kind error
	}{
		{"empty", nil, errdefs.ErrInvalid},
		{"not PEM", []byte("hello"), errdefs.ErrInvalid},
		{"a key", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1}}), errdefs.ErrInvalid},
		{"two certificates", append(append([]byte{}, pemData...), pemData...), errdefs.ErrInvalid},
		{"bad DER", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1, 2}}), errdefs.ErrInvalid},
		{"expired", expired, errdefs.ErrInvalid},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := svc.AddCertificate(ctx, "", tt.data, "test", ""); !errors.Is(err, tt.kind) {
				t.Fatalf("AddCertificate = %v, want %v", err, tt.kind)
			}
		})
	}
	added, err := svc.AddCertificate(ctx, "", pemData, "test", "")
	if err != nil || added.Name != "alice-laptop" || added.Fingerprint != auth.Fingerprint(cert) {
		t.Fatalf("AddCertificate = %+v, %v", added, err)
	}
	if _, err := svc.AddCertificate(ctx, "again", pemData, "test", ""); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("duplicate = %v, want already exists", err)
	}
	if got, err := svc.AuthenticateCertificate(ctx, cert); err != nil || got.Name != "alice-laptop" {
		t.Fatalf("AuthenticateCertificate = %+v, %v", got, err)
	}
	if _, err := svc.AuthenticateCertificate(ctx, other); !errors.Is(err, errdefs.ErrUnauthorized) {
		t.Fatalf("untrusted certificate = %v, want unauthorized", err)
	}
	// Any fingerprint form finds it.
	colons := strings.ToUpper(added.Fingerprint[:2]) + ":" + added.Fingerprint[2:]
	if _, err := svc.Certificate(ctx, "sha256:"+colons); err != nil {
		t.Fatalf("Certificate by another form: %v", err)
	}
	if _, err := svc.Certificate(ctx, "abc"); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("short fingerprint = %v, want invalid", err)
	}
	ids, err := svc.Identities(ctx)
	if err != nil || len(ids) != 1 || ids[0].Type != auth.TypeTLS || ids[0].ID != added.Fingerprint {
		t.Fatalf("Identities = %+v, %v", ids, err)
	}
	if err := svc.RemoveCertificate(ctx, added.Fingerprint); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.AuthenticateCertificate(ctx, cert); !errors.Is(err, errdefs.ErrUnauthorized) {
		t.Fatalf("removed certificate = %v, want unauthorized", err)
	}
	if err := svc.RemoveCertificate(ctx, added.Fingerprint); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("removing again = %v, want not found", err)
	}
	// A certificate past its validity no longer authenticates.
	clk.add(-3 * time.Hour)
	if _, err := svc.AddCertificate(ctx, "", pemData, "test", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.AuthenticateCertificate(ctx, cert); !errors.Is(err, errdefs.ErrUnauthorized) {
		t.Fatalf("not-yet-valid certificate = %v, want unauthorized", err)
	}
}

// TestRunPurges checks, on synctest's fake clock, that Run deletes expired
// login tokens within one interval, and nothing before they expire.
func TestRunPurges(t *testing.T) {
	path := "sqlite://" + filepath.Join(t.TempDir(), "auth.db")
	synctest.Test(t, func(t *testing.T) {
		// The store lives in the bubble too: its writer goroutine and
		// connection pool run on the fake clock, and close before the end.
		bg := context.Background()
		st, err := db.Open(bg, path)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		as := st.(auth.Store)
		svc, err := auth.New(auth.Config{Store: as, LoginTTL: 10 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		login, _, err := svc.NewLogin(bg, "test")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(bg)
		done := make(chan struct{})
		go func() { defer close(done); svc.Run(ctx, time.Minute) }()

		time.Sleep(9 * time.Minute) // fake time: nine purges ran, the token is live
		synctest.Wait()
		if n, err := as.PurgeAuth(bg, time.Now().Add(time.Hour)); err != nil || n != 1 {
			t.Fatalf("before expiry %d rows were left for a later purge (%v), want the live token", n, err)
		}
		login, _, err = svc.NewLogin(bg, "test")
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(11 * time.Minute) // expired, and Run's next tick came
		synctest.Wait()
		if _, _, err := svc.Redeem(bg, login); !errors.Is(err, errdefs.ErrUnauthorized) {
			t.Fatalf("expired login redeemed: %v", err)
		}
		if n, err := as.PurgeAuth(bg, time.Now().Add(time.Hour)); err != nil || n != 0 {
			t.Fatalf("after Run, %d expired rows were left (%v)", n, err)
		}
		cancel()
		<-done
	})
}

// TestParseDevlxdExpiry: a devlxd token may expire after as little as one
// second, as LXD's (whose expiry expressions count whole seconds); the
// admin API's tokens keep their one-minute floor (TestParseExpiry).
func TestParseDevlxdExpiry(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{"", 0, ""},
		{"1s", time.Second, ""},
		{"30s", 30 * time.Second, ""},
		{"90m", 90 * time.Minute, ""},
		{"7d", 7 * 24 * time.Hour, ""},
		{"0s", 0, `invalid expiry "0s": at least 1s`},
		{"500ms", 0, `invalid expiry "500ms": at least 1s`},
		{"-1s", 0, `invalid expiry "-1s": at least 1s`},
		{"99999d", 0, `invalid expiry "99999d": at most`},
	} {
		t.Run(tt.in, func(t *testing.T) {
			got, err := auth.ParseDevlxdExpiry(tt.in)
			switch {
			case tt.err == "" && (err != nil || got != tt.want):
				t.Fatalf("ParseDevlxdExpiry(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			case tt.err != "" && (err == nil || !errors.Is(err, errdefs.ErrInvalid) || !strings.HasPrefix(err.Error(), tt.err)):
				t.Fatalf("ParseDevlxdExpiry(%q) = %v, %v; want an invalid-argument error starting %q", tt.in, got, err, tt.err)
			}
		})
	}
	if _, err := auth.ParseExpiry("30s"); err == nil || !strings.Contains(err.Error(), "at least 1m:") {
		t.Fatalf("ParseExpiry(30s) = %v, want the admin tokens' 1m floor", err)
	}
}
