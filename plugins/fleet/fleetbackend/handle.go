package fleetbackend

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"github.com/guestlink/guestlink/plugins/sdk"
)

// handleVersion is the version of the handle format.
const handleVersion = 1

// handle is the JSON document behind an sdk.Handle of this backend.
type handle struct {
	V    int    `json:"v"`
	ID   string `json:"id"`  // the guest directory's name
	Dir  string `json:"dir"` // the guest directory
	Name string `json:"name"`
	UUID string `json:"uuid"`
}

var idPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

func (h *handle) encode() sdk.Handle {
	data, _ := json.Marshal(h) // cannot fail: only strings and ints
	return data
}

// decodeHandle parses and checks a handle; garbage is sdk.ErrInvalid.
func decodeHandle(raw sdk.Handle) (*handle, error) {
	if len(raw) == 0 {
		return nil, fmt.Errorf("empty handle: %w", sdk.ErrInvalid)
	}
	var h handle
	if err := json.Unmarshal(raw, &h); err != nil {
		return nil, fmt.Errorf("decoding handle: %v: %w", err, sdk.ErrInvalid)
	}
	switch {
	case h.V != handleVersion:
		return nil, fmt.Errorf("handle version %d, want %d: %w", h.V, handleVersion, sdk.ErrInvalid)
	case !idPattern.MatchString(h.ID):
		return nil, fmt.Errorf("handle id %q is malformed: %w", h.ID, sdk.ErrInvalid)
	case !filepath.IsAbs(h.Dir) || filepath.Clean(h.Dir) != h.Dir || filepath.Base(h.Dir) != h.ID:
		return nil, fmt.Errorf("handle directory %q does not match id %q: %w", h.Dir, h.ID, sdk.ErrInvalid)
	}
	return &h, nil
}

// marker is guest.json, written at Create: it proves a directory is a guest
// directory of this backend before anything in it is touched or removed.
type marker struct {
	ID   string `json:"id"`
	UUID string `json:"uuid"`
	Name string `json:"name"`
}

func markerPath(dir string) string { return filepath.Join(dir, "guest.json") }

func writeMarker(h *handle) error {
	data, _ := json.Marshal(marker{ID: h.ID, UUID: h.UUID, Name: h.Name})
	if err := os.WriteFile(markerPath(h.Dir), data, 0o600); err != nil {
		return fmt.Errorf("writing guest marker: %w", err)
	}
	return nil
}

// checkDir verifies that h's directory exists and belongs to h: a missing
// directory is sdk.ErrNotFound, a foreign one sdk.ErrInvalid.
func checkDir(h *handle) error {
	data, err := os.ReadFile(markerPath(h.Dir))
	if errors.Is(err, os.ErrNotExist) {
		if _, serr := os.Stat(h.Dir); errors.Is(serr, os.ErrNotExist) {
			return fmt.Errorf("guest %q: directory %s does not exist: %w", h.ID, h.Dir, sdk.ErrNotFound)
		}
		return fmt.Errorf("guest %q: %s is not a fleet guest directory: %w", h.ID, h.Dir, sdk.ErrInvalid)
	}
	if err != nil {
		return fmt.Errorf("guest %q: %w", h.ID, err)
	}
	var m marker
	if err := json.Unmarshal(data, &m); err != nil || m.ID != h.ID || m.UUID != h.UUID {
		return fmt.Errorf("guest %q: handle does not match the guest directory %s: %w", h.ID, h.Dir, sdk.ErrInvalid)
	}
	return nil
}

// Paths of a guest directory (the same layout as a sim guest's).
func rootDir(dir string) string      { return filepath.Join(dir, "rootfs") }
func portsDir(dir string) string     { return filepath.Join(rootDir(dir), "dev", "virtio-ports") }
func devlxdSocket(dir string) string { return filepath.Join(rootDir(dir), "dev", "lxd", "sock") }
func configDrive(dir string) string  { return filepath.Join(rootDir(dir), "run", "guestlink-agent") }
func stateDir(dir string) string     { return filepath.Join(configDrive(dir), "state") }
func linkSocket(dir string) string   { return filepath.Join(dir, "link.sock") }
