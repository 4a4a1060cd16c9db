package db

import (
	"strings"
	"time"

	"github.com/guestlink/guestlink/core/auth"
)

// The rows of core/auth's state. Each is the store's form of one of
// auth's types, converted at the edge (the functions below); secrets are
// kept only as hashes.

// trustedCertificate is the row of a TLS client certificate the admin API
// trusts (auth.Certificate).
type trustedCertificate struct {
	ID          int64     `gorm:"primaryKey"`
	Name        string    `gorm:"size:63;not null"`
	Fingerprint string    `gorm:"uniqueIndex:idx_trusted_certificates_fingerprint;size:64;not null"` // SHA-256 of the DER, lowercase hex
	Certificate string    `gorm:"type:text;not null"`                                                // PEM
	AddedAt     time.Time `gorm:"not null"`
	AddedBy     string    `gorm:"size:255"`
	Role        string    `gorm:"size:16;not null;default:admin"` // RoleAdmin or RoleViewer
}

// TableName is the table of trusted certificates.
func (trustedCertificate) TableName() string { return "trusted_certificates" }

func trustedCertificateRow(c *auth.Certificate) *trustedCertificate {
	return &trustedCertificate{Name: c.Name, Fingerprint: c.Fingerprint, Certificate: c.Certificate, AddedAt: c.AddedAt, AddedBy: c.AddedBy, Role: c.Role}
}

func (r *trustedCertificate) certificate() *auth.Certificate {
	return &auth.Certificate{Name: r.Name, Fingerprint: r.Fingerprint, Certificate: r.Certificate, AddedAt: r.AddedAt.UTC(), AddedBy: r.AddedBy, Role: r.Role}
}

// bearerIdentity is the row of a bearer identity of the admin API
// (auth.BearerIdentity): only the SHA-256 of its one live token.
type bearerIdentity struct {
	ID             int64  `gorm:"primaryKey"`
	Name           string `gorm:"uniqueIndex:idx_bearer_identities_name;size:63;not null"`
	TokenHash      string `gorm:"index:idx_bearer_identities_token_hash;size:64"` // "" when no token is live
	TokenIssuedAt  *time.Time
	TokenExpiresAt *time.Time // nil: the token does not expire
	CreatedAt      time.Time  `gorm:"not null"`
	CreatedBy      string     `gorm:"size:255"`
	Role           string     `gorm:"size:16;not null;default:admin"` // RoleAdmin or RoleViewer
}

// TableName is the table of bearer identities.
func (bearerIdentity) TableName() string { return "bearer_identities" }

func bearerIdentityRow(id *auth.BearerIdentity) *bearerIdentity {
	return &bearerIdentity{Name: id.Name, TokenHash: id.TokenHash, TokenIssuedAt: id.TokenIssuedAt, TokenExpiresAt: id.TokenExpiresAt,
		CreatedAt: id.CreatedAt, CreatedBy: id.CreatedBy, Role: id.Role}
}

func (r *bearerIdentity) identity() *auth.BearerIdentity {
	return &auth.BearerIdentity{Name: r.Name, TokenHash: r.TokenHash, TokenIssuedAt: r.TokenIssuedAt, TokenExpiresAt: r.TokenExpiresAt,
		CreatedAt: r.CreatedAt, CreatedBy: r.CreatedBy, Role: r.Role}
}

// loginToken is the row of a one-time dashboard login token, kept as its
// SHA-256 (auth.LoginToken).
type loginToken struct {
	ID        int64     `gorm:"primaryKey"`
	Hash      string    `gorm:"uniqueIndex:idx_login_tokens_hash;size:64;not null"`
	CreatedAt time.Time `gorm:"not null"`
	ExpiresAt time.Time `gorm:"index:idx_login_tokens_expires_at;not null"`
	CreatedBy string    `gorm:"size:255"`
}

// TableName is the table of login tokens.
func (loginToken) TableName() string { return "login_tokens" }

// session is the row of a dashboard session, kept as the SHA-256 of its
// id (auth.SessionRecord).
type session struct {
	ID        int64     `gorm:"primaryKey"`
	Hash      string    `gorm:"uniqueIndex:idx_sessions_hash;size:64;not null"`
	CreatedAt time.Time `gorm:"not null"`
	ExpiresAt time.Time `gorm:"index:idx_sessions_expires_at;not null"`
	CreatedBy string    `gorm:"size:255"` // who issued the login token it came from
}

// TableName is the table of sessions.
func (session) TableName() string { return "sessions" }

func (r *session) record() *auth.SessionRecord {
	return &auth.SessionRecord{Hash: r.Hash, CreatedAt: r.CreatedAt.UTC(), ExpiresAt: r.ExpiresAt.UTC(), CreatedBy: r.CreatedBy}
}

// devlxdIdentity is the row of a devlxd identity (auth.DevlxdIdentity):
// its instances comma-separated, only the SHA-256 of its one live token.
type devlxdIdentity struct {
	ID             int64  `gorm:"primaryKey"`
	Name           string `gorm:"uniqueIndex:idx_devlxd_identities_name;size:63;not null"`
	Instances      string `gorm:"type:text;not null"` // comma-separated instance names (DNS labels)
	TokenHash      string `gorm:"index:idx_devlxd_identities_token_hash;size:64"`
	TokenIssuedAt  *time.Time
	TokenExpiresAt *time.Time // nil: the token does not expire
	CreatedAt      time.Time  `gorm:"not null"`
	CreatedBy      string     `gorm:"size:255"`
}

// TableName is the table of devlxd identities.
func (devlxdIdentity) TableName() string { return "devlxd_identities" }

func devlxdIdentityRow(id *auth.DevlxdIdentity) *devlxdIdentity {
	return &devlxdIdentity{Name: id.Name, Instances: strings.Join(id.Instances, ","), TokenHash: id.TokenHash, TokenIssuedAt: id.TokenIssuedAt,
		TokenExpiresAt: id.TokenExpiresAt, CreatedAt: id.CreatedAt, CreatedBy: id.CreatedBy}
}

func (r *devlxdIdentity) identity() *auth.DevlxdIdentity {
	instances := []string{}
	if r.Instances != "" {
		instances = strings.Split(r.Instances, ",")
	}
	return &auth.DevlxdIdentity{Name: r.Name, Instances: instances, TokenHash: r.TokenHash, TokenIssuedAt: r.TokenIssuedAt,
		TokenExpiresAt: r.TokenExpiresAt, CreatedAt: r.CreatedAt, CreatedBy: r.CreatedBy}
}
