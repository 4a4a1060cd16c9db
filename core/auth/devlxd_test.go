package auth_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/auth"
	"github.com/guestlink/guestlink/errdefs"
)

func TestDevlxdIdentityCreateValidation(t *testing.T) {
	ctx := context.Background()
	svc, _, _ := newService(t, 0)
	for _, tt := range []struct {
		name, id  string
		instances []string
		want      error
		msg       string
	}{
		{"no instance", "csi", nil, errdefs.ErrInvalid, "at least one instance"},
		{"bad instance name", "csi", []string{"web_1"}, errdefs.ErrInvalid, `invalid instance name "web_1"`},
		{"bad identity name", "csi/x", []string{"web1"}, errdefs.ErrInvalid, "invalid name"},
		{"ok", "csi", []string{"web1", "web2", "web1"}, nil, ""},
		{"duplicate", "csi", []string{"web1"}, errdefs.ErrAlreadyExists, "devlxd/csi already exists"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			id, err := svc.CreateDevlxdIdentity(ctx, tt.id, tt.instances, "test")
			if tt.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				if id.ID != "devlxd/csi" || id.Type != auth.TypeDevlxd || !slices.Equal(id.Instances, []string{"web1", "web2"}) {
					t.Fatalf("created %+v, want devlxd/csi scoped to web1,web2", id)
				}
				return
			}
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("err = %v, want %v containing %q", err, tt.want, tt.msg)
			}
		})
	}
	list, err := svc.Identities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != "devlxd/csi" || list[0].HasToken {
		t.Fatalf("Identities = %+v, want devlxd/csi without token", list)
	}
}

func TestDevlxdTokens(t *testing.T) {
	ctx := context.Background()
	svc, st, clk := newService(t, 0)
	if _, err := svc.CreateDevlxdIdentity(ctx, "csi", []string{"web1"}, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.CreateIdentity(ctx, "csi", "test", ""); err != nil { // same name, other kind
		t.Fatal(err)
	}
	tok, exp, err := svc.IssueDevlxdToken(ctx, "csi", time.Hour)
	if err != nil || exp == nil {
		t.Fatalf("IssueDevlxdToken = %q, %v, %v", tok, exp, err)
	}
	if !strings.HasPrefix(tok, auth.PrefixDevlxd) || len(tok) != len(auth.PrefixDevlxd)+43 {
		t.Fatalf("token %q: want gld_ and 43 base64url characters", tok)
	}
	rows, err := st.(auth.DevlxdStore).DevlxdIdentities(ctx)
	if err != nil || len(rows) != 1 || rows[0].TokenHash != sha(tok) {
		t.Fatalf("stored %+v, %v: want the token's SHA-256 only", rows, err)
	}
	admin, _, err := svc.IssueToken(ctx, "csi", 0)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := svc.AuthenticateDevlxd(ctx, tok, "web1"); err != nil || c.Name != "csi" {
		t.Fatalf("AuthenticateDevlxd = %+v, %v", c, err)
	}
	for _, tt := range []struct {
		name, token, caller string
		want                error
	}{
		{"out of scope", tok, "web2", errdefs.ErrForbidden},
		{"admin token on devlxd", admin, "web1", errdefs.ErrUnauthorized},
		{"empty", "", "web1", errdefs.ErrUnauthorized},
		{"unknown", auth.PrefixDevlxd + strings.Repeat("A", 43), "web1", errdefs.ErrUnauthorized},
		{"one character off", tok[:len(tok)-1] + string(rune(tok[len(tok)-1])^1), "web1", errdefs.ErrUnauthorized},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := svc.AuthenticateDevlxd(ctx, tt.token, tt.caller); !errors.Is(err, tt.want) {
				t.Fatalf("AuthenticateDevlxd = %v, want %v", err, tt.want)
			}
		})
	}
	// Only the form of a devlxd token counts as one (devlxd serves any
	// other bearer value as an untrusted caller).
	for _, tt := range []struct {
		name, token string
		want        bool
	}{
		{"issued devlxd token", tok, true},
		{"unknown devlxd-form token", auth.PrefixDevlxd + strings.Repeat("A", 43), true},
		{"admin API token", admin, false},
		{"empty", "", false},
		{"prefix alone", auth.PrefixDevlxd, false},
		{"one character short", tok[:len(tok)-1], false},
		{"a JWT", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln", false},
	} {
		if got := auth.IsDevlxdToken(tt.token); got != tt.want {
			t.Errorf("IsDevlxdToken(%s) = %v, want %v", tt.name, got, tt.want)
		}
	}
	// A devlxd token is no admin API token.
	if _, err := svc.AuthenticateToken(ctx, tok); !errors.Is(err, errdefs.ErrUnauthorized) {
		t.Fatalf("devlxd token on the admin API: %v, want unauthorized", err)
	}
	// Expiry.
	clk.add(time.Hour)
	if _, err := svc.AuthenticateDevlxd(ctx, tok, "web1"); !errors.Is(err, errdefs.ErrUnauthorized) || !errors.Is(err, auth.ErrDevlxdTokenExpired) {
		t.Fatalf("expired token: %v", err)
	}
	// Revoke, then delete.
	tok2, _, err := svc.IssueDevlxdToken(ctx, "csi", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.RevokeDevlxdToken(ctx, "csi"); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.AuthenticateDevlxd(ctx, tok2, "web1"); !errors.Is(err, errdefs.ErrUnauthorized) || !errors.Is(err, auth.ErrDevlxdTokenUnknown) {
		t.Fatalf("revoked token: %v", err)
	}
	if err := svc.DeleteDevlxdIdentity(ctx, "csi"); err != nil {
		t.Fatal(err)
	}
	if err := svc.DeleteDevlxdIdentity(ctx, "csi"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("second delete: %v, want not found", err)
	}
	if err := svc.RevokeDevlxdToken(ctx, "csi"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("revoke of deleted: %v, want not found", err)
	}
}
