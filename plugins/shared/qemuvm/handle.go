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
	Vsock     string       `json:"vsock,omitempty"` // the device of a vsock link: VsockKernel or VsockUser
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

// checkUUID accepts only the canonical lowercase UUIDs the daemon gives
// guests (8-4-4-4-12 hex digits), the form QEMU's -uuid takes: the uuid
// names the guest directory and identifies its QEMU process, so nothing
// else (an option such as "-c", a path) may pass.
func checkUUID(u string) error {
	if len(u) != 36 {
		return fmt.Errorf("uuid %q: want 36 characters (8-4-4-4-12 lowercase hex digits)", u)
	}
	for i, r := range u {
		switch i {
		case 8, 13, 18, 23:
			if r != '-' {
				return fmt.Errorf("uuid %q: want '-' at offset %d", u, i)
			}
		default:
			if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
				return fmt.Errorf("uuid %q: only lowercase hex digits and '-' are allowed", u)
			}
		}
	}
	return nil
}

// decode parses and checks a handle like decodeHandle, and also requires its
// guest directory to be a guest directory of this backend (directly under
// Options.Dir): a handle naming any other directory is sdk.ErrInvalid, so a
// crafted handle cannot make the backend stop or delete what is not its own.
func (b *Backend) decode(raw sdk.Handle) (*handle, error) {
	h, err := decodeHandle(raw)
	if err != nil {
		return nil, err
	}
	if filepath.Dir(h.Dir) != b.opts.Dir {
		return nil, fmt.Errorf("%w: handle of %q: guest directory %s is outside %s", sdk.ErrInvalid, h.UUID, h.Dir, b.opts.Dir)
	}
	return h, nil
}
