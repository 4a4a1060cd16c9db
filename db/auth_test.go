package db_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/auth"
	"github.com/guestlink/guestlink/db"
	"github.com/guestlink/guestlink/db/dbtest"
	"github.com/guestlink/guestlink/errdefs"
)

// hash returns a distinct 64-digit hex string for n.
func hash(n int) string { return fmt.Sprintf("%064x", n) }

// TestAuthStore runs the authentication state through every engine.
func TestAuthStore(t *testing.T) {
	for _, e := range dbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			ctx := testContext(t)
			s := dbtest.Open(t, e.URL(t)).(auth.Store)
			now := time.Now().UTC().Truncate(time.Microsecond)

			t.Run("certificates", func(t *testing.T) {
				c := &auth.Certificate{Name: "alice", Fingerprint: hash(1), Certificate: "PEM", AddedAt: now, AddedBy: "unix root (uid 0)"}
				if err := s.AddCertificate(ctx, c); err != nil {
					t.Fatalf("AddCertificate: %v", err)
				}
				dup := *c
				if err := s.AddCertificate(ctx, &dup); !errors.Is(err, db.ErrAlreadyExists) {
					t.Fatalf("duplicate fingerprint: %v", err)
				}
				if err := s.AddCertificate(ctx, &auth.Certificate{Name: "x", Fingerprint: "short", Certificate: "P"}); !errors.Is(err, db.ErrInvalid) {
					t.Fatalf("short fingerprint: %v", err)
				}
				got, err := s.Certificate(ctx, hash(1))
				if err != nil || got.Name != "alice" || !got.AddedAt.Equal(now) || got.Role != auth.RoleAdmin {
					t.Fatalf("Certificate = %+v, %v (a certificate added without a role is an admin)", got, err)
				}
				v := &auth.Certificate{Name: "wall", Fingerprint: hash(9), Certificate: "PEM", AddedAt: now, Role: auth.RoleViewer}
				if err := s.AddCertificate(ctx, v); err != nil {
					t.Fatal(err)
				}
				if got, err := s.Certificate(ctx, hash(9)); err != nil || got.Role != auth.RoleViewer {
					t.Fatalf("viewer certificate = %+v, %v", got, err)
				}
				if err := s.DeleteCertificate(ctx, hash(9)); err != nil {
					t.Fatal(err)
				}
				if list, err := s.Certificates(ctx); err != nil || len(list) != 1 {
					t.Fatalf("Certificates = %d, %v", len(list), err)
				}
				if err := s.DeleteCertificate(ctx, hash(1)); err != nil {
					t.Fatal(err)
				}
				if err := s.DeleteCertificate(ctx, hash(1)); !errors.Is(err, db.ErrNotFound) {
					t.Fatalf("second delete: %v", err)
				}
			})

			t.Run("identities", func(t *testing.T) {
				if err := s.CreateIdentity(ctx, &auth.BearerIdentity{Name: "ci", CreatedAt: now}); err != nil {
					t.Fatal(err)
				}
				if err := s.CreateIdentity(ctx, &auth.BearerIdentity{Name: "ci", CreatedAt: now}); !errors.Is(err, db.ErrAlreadyExists) {
					t.Fatalf("duplicate identity: %v", err)
				}
				exp := now.Add(time.Hour)
				if err := s.SetIdentityToken(ctx, "ci", hash(2), &now, &exp); err != nil {
					t.Fatal(err)
				}
				id, err := s.IdentityByTokenHash(ctx, hash(2))
				if err != nil || id.Name != "ci" || id.TokenExpiresAt == nil || !id.TokenExpiresAt.Equal(exp) || id.Role != auth.RoleAdmin {
					t.Fatalf("IdentityByTokenHash = %+v, %v", id, err)
				}
				if err := s.SetIdentityToken(ctx, "ci", "", nil, nil); err != nil {
					t.Fatal(err)
				}
				if _, err := s.IdentityByTokenHash(ctx, hash(2)); !errors.Is(err, db.ErrNotFound) {
					t.Fatalf("revoked token found: %v", err)
				}
				if _, err := s.IdentityByTokenHash(ctx, ""); !errors.Is(err, db.ErrNotFound) {
					t.Fatalf("empty hash found an identity without a token: %v", err)
				}
				if err := s.SetIdentityToken(ctx, "nobody", hash(3), &now, nil); !errors.Is(err, db.ErrNotFound) {
					t.Fatalf("token of a missing identity: %v", err)
				}
				if err := s.DeleteIdentity(ctx, "ci"); err != nil {
					t.Fatal(err)
				}
				if list, err := s.Identities(ctx); err != nil || len(list) != 0 {
					t.Fatalf("Identities after delete = %d, %v", len(list), err)
				}
			})

			t.Run("logins and sessions", func(t *testing.T) {
				for i := range 2 {
					if err := s.CreateLoginToken(ctx, &auth.LoginToken{Hash: hash(10 + i), CreatedAt: now, ExpiresAt: now.Add(time.Minute), CreatedBy: "admin"}, now, 2); err != nil {
						t.Fatal(err)
					}
				}
				if err := s.CreateLoginToken(ctx, &auth.LoginToken{Hash: hash(12), CreatedAt: now, ExpiresAt: now.Add(time.Minute)}, now, 2); !errors.Is(err, errdefs.ErrConflict) {
					t.Fatalf("over the cap: %v", err)
				}
				sess := &auth.SessionRecord{Hash: hash(20), CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
				if err := s.RedeemLoginToken(ctx, hash(10), now, sess); err != nil || sess.CreatedBy != "admin" {
					t.Fatalf("Redeem: %v (%+v)", err, sess)
				}
				if err := s.RedeemLoginToken(ctx, hash(10), now, &auth.SessionRecord{Hash: hash(21), ExpiresAt: now}); !errors.Is(err, db.ErrNotFound) {
					t.Fatalf("second redeem: %v", err)
				}
				if err := s.RedeemLoginToken(ctx, hash(11), now.Add(time.Minute), &auth.SessionRecord{Hash: hash(22), ExpiresAt: now}); !errors.Is(err, db.ErrNotFound) {
					t.Fatalf("expired redeem: %v", err)
				}
				if _, err := s.SessionByHash(ctx, hash(21)); !errors.Is(err, db.ErrNotFound) {
					t.Fatalf("a failed redeem stored its session: %v", err)
				}
				if list, err := s.Sessions(ctx, now); err != nil || len(list) != 1 || list[0].Hash != hash(20) {
					t.Fatalf("Sessions = %+v, %v", list, err)
				}
				if _, err := s.DeleteSessions(ctx, "0000", false); !errors.Is(err, db.ErrInvalid) {
					t.Fatalf("short prefix: %v", err)
				}
				if _, err := s.DeleteSessions(ctx, "0000000%", false); !errors.Is(err, db.ErrInvalid) {
					t.Fatalf("wildcard in prefix: %v", err)
				}
				if n, err := s.DeleteSessions(ctx, hash(20)[:60], true); err != nil || n != 0 {
					t.Fatalf("exact delete of a prefix = %d, %v", n, err)
				}
				if n, err := s.DeleteSessions(ctx, strings.TrimLeft(hash(20), "0")+"x", false); err == nil || n != 0 {
					t.Fatalf("bad id deleted %d: %v", n, err)
				}
				if n, err := s.DeleteSessions(ctx, hash(20)[:62], false); err != nil || n != 1 {
					t.Fatalf("delete by prefix = %d, %v", n, err)
				}
				// Purge takes what expired, nothing else.
				if err := s.CreateLoginToken(ctx, &auth.LoginToken{Hash: hash(30), CreatedAt: now, ExpiresAt: now.Add(time.Hour)}, now, 0); err != nil {
					t.Fatal(err)
				}
				if n, err := s.PurgeAuth(ctx, now.Add(time.Minute)); err != nil || n != 1 {
					t.Fatalf("PurgeAuth = %d, %v; want the expired login token", n, err)
				}
				if err := s.RedeemLoginToken(ctx, hash(30), now, &auth.SessionRecord{Hash: hash(31), CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
					t.Fatalf("a live token was purged: %v", err)
				}
			})
		})
	}
}
