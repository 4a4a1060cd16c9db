package cluster

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/guestlink/guestlink/errdefs"
)

// tokenPrefix starts every join token, so a token pasted in the wrong
// place is recognised.
const tokenPrefix = "glj_"

// joinToken is what a join token carries: the member it admits, where to
// present it, the fingerprint of the cluster CA (the joiner checks the
// member it talks to against it before sending the secret) and the secret.
type joinToken struct {
	Name      string   `json:"n"`
	Addresses []string `json:"a"`
	CA        string   `json:"f"`
	Secret    string   `json:"s"`
}

// newSecret returns 32 random bytes, base64url.
func newSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("making a join secret: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// encode returns the token's text.
func (t joinToken) encode() string {
	raw, _ := json.Marshal(t)
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(raw)
}

// parseToken decodes a join token's text.
func parseToken(s string) (*joinToken, error) {
	s = strings.TrimSpace(s)
	body, ok := strings.CutPrefix(s, tokenPrefix)
	if !ok {
		return nil, fmt.Errorf("not a join token (they start with %q: see guestlink cluster add): %w", tokenPrefix, errdefs.ErrInvalid)
	}
	raw, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		return nil, fmt.Errorf("the join token is damaged (not base64url): %w", errdefs.ErrInvalid)
	}
	var t joinToken
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("the join token is damaged: %w", errdefs.ErrInvalid)
	}
	if t.Name == "" || len(t.Addresses) == 0 || len(t.CA) != 64 || t.Secret == "" {
		return nil, fmt.Errorf("the join token is incomplete: %w", errdefs.ErrInvalid)
	}
	return &t, nil
}
