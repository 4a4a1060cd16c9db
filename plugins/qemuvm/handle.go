package qemuvm

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/guestlink/guestlink/plugins/sdk"
)

// handleVersion is the version of the handle document.
const handleVersion = 1

// handle is what the daemon stores for a QEMU guest (as JSON). Everything
// needed to find a running QEMU again after a plugin or daemon restart is in
// it: the guest directory (QMP socket inside), the PID and its start time.
type handle struct {
	Version   int          `json:"v"`
	UUID      string       `json:"uuid"`
	Name      string       `json:"name"`
	Dir       string       `json:"dir"`
	Layout    Layout       `json:"layout"`
	PID       int          `json:"pid,omitempty"`
	StartTime uint64       `json:"start_time,omitempty"` // /proc/<pid>/stat starttime
	Accel     string       `json:"accel,omitempty"`
	Link      sdk.LinkKind `json:"link,omitempty"`
	CID       uint32       `json:"cid,omitempty"`
}

func (h *handle) encode() sdk.Handle {
	b, _ := json.Marshal(h)
	return b
}

// decodeHandle parses and checks a handle; errors wrap sdk.ErrInvalid.
func decodeHandle(b sdk.Handle) (*handle, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty handle", sdk.ErrInvalid)
	}
	var h handle
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("%w: handle is not a qemu handle: %v", sdk.ErrInvalid, err)
	}
	if h.Version != handleVersion {
		return nil, fmt.Errorf("%w: handle version %d, want %d", sdk.ErrInvalid, h.Version, handleVersion)
	}
	if err := checkUUID(h.UUID); err != nil {
		return nil, fmt.Errorf("%w: handle: %v", sdk.ErrInvalid, err)
	}
	if !filepath.IsAbs(h.Dir) || filepath.Clean(h.Dir) != h.Dir || filepath.Base(h.Dir) != h.UUID || strings.ContainsAny(h.Dir, "'\x00\n") {
		return nil, fmt.Errorf("%w: handle of %q: bad guest directory %q", sdk.ErrInvalid, h.UUID, h.Dir)
	}
	if !h.Layout.Valid() {
		return nil, fmt.Errorf("%w: handle of %q: unknown layout %q", sdk.ErrInvalid, h.UUID, h.Layout)
	}
	return &h, nil
}

// checkUUID accepts the UUID-like ids guests are named by in paths.
func checkUUID(u string) error {
	if u == "" || len(u) > 64 {
		return fmt.Errorf("uuid %q: want 1 to 64 characters", u)
	}
	for _, r := range u {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
			return fmt.Errorf("uuid %q: only letters, digits and '-' are allowed", u)
		}
	}
	return nil
}
