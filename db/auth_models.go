package db

import "time"

// TrustedCertificate is a TLS client certificate the admin API trusts.
type TrustedCertificate struct {
	ID          int64     `gorm:"primaryKey"`
	Name        string    `gorm:"size:63;not null"`
	Fingerprint string    `gorm:"uniqueIndex:idx_trusted_certificates_fingerprint;size:64;not null"` // SHA-256 of the DER, lowercase hex
	Certificate string    `gorm:"type:text;not null"`                                                // PEM
	AddedAt     time.Time `gorm:"not null"`
	AddedBy     string    `gorm:"size:255"`
	Role        string    `gorm:"size:16;not null;default:admin"` // RoleAdmin or RoleViewer
}

// BearerIdentity is a named identity of the admin API that authenticates
// with a bearer token. Only the SHA-256 of its one live token is stored.
type BearerIdentity struct {
	ID             int64  `gorm:"primaryKey"`
	Name           string `gorm:"uniqueIndex:idx_bearer_identities_name;size:63;not null"`
	TokenHash      string `gorm:"index:idx_bearer_identities_token_hash;size:64"` // "" when no token is live
	TokenIssuedAt  *time.Time
	TokenExpiresAt *time.Time // nil: the token does not expire
	CreatedAt      time.Time  `gorm:"not null"`
	CreatedBy      string     `gorm:"size:255"`
	Role           string     `gorm:"size:16;not null;default:admin"` // RoleAdmin or RoleViewer
}

// LoginToken is a one-time dashboard login token, stored as its SHA-256.
type LoginToken struct {
	ID        int64     `gorm:"primaryKey"`
	Hash      string    `gorm:"uniqueIndex:idx_login_tokens_hash;size:64;not null"`
	CreatedAt time.Time `gorm:"not null"`
	ExpiresAt time.Time `gorm:"index:idx_login_tokens_expires_at;not null"`
	CreatedBy string    `gorm:"size:255"`
}

// Session is a dashboard session, stored as the SHA-256 of its id.
type Session struct {
	ID        int64     `gorm:"primaryKey"`
	Hash      string    `gorm:"uniqueIndex:idx_sessions_hash;size:64;not null"`
	CreatedAt time.Time `gorm:"not null"`
	ExpiresAt time.Time `gorm:"index:idx_sessions_expires_at;not null"`
	CreatedBy string    `gorm:"size:255"` // who issued the login token it came from
}
