package api

import "time"

// Requestor protocols of the admin API (events' requestor.protocol).
const (
	ProtocolUnix   = "unix"   // the admin socket: username and uid from SO_PEERCRED
	ProtocolTLS    = "tls"    // a trusted client certificate: its name and fingerprint
	ProtocolBearer = "bearer" // a bearer token: the identity "bearer/NAME"
)

// Certificate is a trusted client certificate (GET /1.0/certificates).
type Certificate struct {
	Name        string    `json:"name"`
	Type        string    `json:"type"` // "client"
	Fingerprint string    `json:"fingerprint"`
	Certificate string    `json:"certificate"` // PEM
	AddedAt     time.Time `json:"added_at"`
	AddedBy     string    `json:"added_by"`
	Role        string    `json:"role"` // RoleAdmin or RoleViewer
}

// Roles of trusted certificates and bearer identities.
const (
	// RoleAdmin may do everything the admin API offers (the default).
	RoleAdmin = "admin"
	// RoleViewer may only read: GET and the events stream, nothing
	// under /1.0/auth or /1.0/certificates.
	RoleViewer = "viewer"
)

// CertificatesPost is the body of POST /1.0/certificates. Certificate is
// PEM, or (as LXD sends it) the base64 of the DER.
type CertificatesPost struct {
	Name        string `json:"name,omitempty"`
	Type        string `json:"type,omitempty"` // "" or "client"
	Certificate string `json:"certificate"`
	Role        string `json:"role,omitempty"` // "" (admin), RoleAdmin or RoleViewer
}

// Identity is one identity of GET /1.0/auth/identities: a trusted
// certificate (type "tls", id = fingerprint), a bearer identity of the admin
// API (type "bearer", id = "bearer/NAME") or a devlxd identity (type
// "devlxd", id = "devlxd/NAME"). Tokens are never shown.
type Identity struct {
	Type           string     `json:"type"`
	Name           string     `json:"name"`
	ID             string     `json:"id"`
	CreatedAt      time.Time  `json:"created_at"`
	CreatedBy      string     `json:"created_by"`
	Instances      []string   `json:"instances,omitempty"` // type "devlxd": the instances it may act for
	Role           string     `json:"role,omitempty"`      // types "tls" and "bearer": RoleAdmin or RoleViewer
	HasToken       bool       `json:"has_token"`
	TokenIssuedAt  *time.Time `json:"token_issued_at,omitempty"`
	TokenExpiresAt *time.Time `json:"token_expires_at,omitempty"`
}

// IdentitiesBearerPost is the body of POST /1.0/auth/identities/bearer.
type IdentitiesBearerPost struct {
	Name string `json:"name"`
	Role string `json:"role,omitempty"` // "" (admin), RoleAdmin or RoleViewer
}

// IdentitiesDevlxdPost is the body of POST /1.0/auth/identities/devlxd: a
// devlxd identity scoped to the instances it may act for (at least one).
type IdentitiesDevlxdPost struct {
	Name      string   `json:"name"`
	Instances []string `json:"instances"`
}

// TokenPost is the body of POST /1.0/auth/identities/bearer/{name}/token.
// Expiry is a duration ("30m", "24h", "7d"); "" means no expiry.
type TokenPost struct {
	Expiry string `json:"expiry,omitempty"`
}

// Token is the answer of POST /1.0/auth/identities/bearer/{name}/token:
// the only time the token is shown.
type Token struct {
	Identity  string     `json:"identity"` // "bearer/NAME" or "devlxd/NAME"
	Token     string     `json:"token"`
	ExpiresAt *time.Time `json:"expires_at"` // null: no expiry
}

// DashboardLogin is the answer of POST /1.0/auth/dashboard-logins: a
// one-time login URL of the dashboard.
type DashboardLogin struct {
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Session is a dashboard session (GET /1.0/auth/sessions). ID is the
// SHA-256 of the secret session id, never the secret itself.
type Session struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"` // "session/<first 8 digits of id>"
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	CreatedBy string    `json:"created_by"`
}
