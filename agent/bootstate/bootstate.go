// Package bootstate keeps what the agent must remember during one boot of
// the guest: the state the guest last declared (Ready/Started) and the last
// advertisement it validated. The file lives in the agent's state directory
// and is ignored when it was written during another boot.
package bootstate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// FileName is the name of the state file in the state directory.
const FileName = "state.json"

// MaxSize is the largest state file read, in bytes.
const MaxSize = 256 << 10

// State is the content of the state file.
type State struct {
	// BootID identifies the boot the state belongs to.
	BootID string `json:"boot_id"`
	// Declared is the state the guest last declared ("Ready", "Started"),
	// empty if it declared none.
	Declared string `json:"declared,omitempty"`
	// DeclaredReason and DeclaredMessage are the declaration's reason and
	// message (guestlink's extensions), re-sent with it to a new daemon.
	DeclaredReason  string `json:"declared_reason,omitempty"`
	DeclaredMessage string `json:"declared_message,omitempty"`
	// DeclaredTo is the advertisement (JSON) of the daemon the declaration
	// was last sent to.
	DeclaredTo json.RawMessage `json:"declared_to,omitempty"`
	// Advertisement is the last validated advertisement (JSON), if any.
	Advertisement json.RawMessage `json:"advertisement,omitempty"`
}

// Load reads the state of boot bootID from dir. A missing file, a file of
// another boot, or an unreadable file yields an empty State for bootID (the
// error says why when it was unreadable).
func Load(dir, bootID string) (State, error) {
	empty := State{BootID: bootID}
	path := filepath.Join(dir, FileName)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return empty, nil
	}
	if err != nil {
		return empty, fmt.Errorf("reading boot state %s: %w", path, err)
	}
	defer f.Close()
	var s State
	dec := json.NewDecoder(&limited{f: f, n: MaxSize})
	if err := dec.Decode(&s); err != nil {
		return empty, fmt.Errorf("decoding boot state %s: %w", path, err)
	}
	if s.BootID != bootID {
		return empty, nil
	}
	return s, nil
}

type limited struct {
	f *os.File
	n int64
}

func (l *limited) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errors.New("state file too large")
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.f.Read(p)
	l.n -= int64(n)
	return n, err
}

// Save writes s to dir atomically (mode 0600), creating dir (0700).
func Save(dir string, s State) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating state directory %s: %w", dir, err)
	}
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("encoding boot state: %w", err)
	}
	tmp, err := os.CreateTemp(dir, FileName+".*")
	if err != nil {
		return fmt.Errorf("writing boot state in %s: %w", dir, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("writing boot state %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing boot state %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, FileName)); err != nil {
		return fmt.Errorf("replacing boot state in %s: %w", dir, err)
	}
	return nil
}

// BootID returns the kernel's boot id: <root>/proc/sys/kernel/random/boot_id
// when that file exists (a simulated guest's stand-in), else the running
// kernel's /proc/sys/kernel/random/boot_id.
func BootID(root string) (string, error) {
	const rel = "proc/sys/kernel/random/boot_id"
	for _, p := range []string{filepath.Join(root, rel), "/" + rel} {
		b, err := os.ReadFile(p)
		if err == nil {
			if id := strings.TrimSpace(string(b)); id != "" {
				return id, nil
			}
		}
	}
	return "", errors.New("reading boot id: no readable proc/sys/kernel/random/boot_id")
}
