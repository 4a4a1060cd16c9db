// Package features is the guest admin's switch of the agent's features: a
// file inside the guest (/etc/guestlink-agent.yaml, inside the guest's root
// on a simulated guest) turns exec, files, state and freeze on or off, as
// Incus's incus-agent.yml does. The file is read again on every Check, so
// a change takes effect at the next request without a restart or SIGHUP.
//
// The file:
//
//	features:
//	  exec: false
//	  files: true
//	  state: true
//	  freeze: true
//
// A feature the file does not name is on; no file turns every feature on.
// A file that cannot be read or parsed turns every feature off (the guest's
// admin meant to switch something off), and Check says why.
package features

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"gopkg.in/yaml.v3"
)

// The features an agent offers.
const (
	Exec   = "exec"
	Files  = "files"
	State  = "state"
	Freeze = "freeze"
)

// Names lists every feature, in the order the agent reports them.
var Names = []string{Exec, Files, State, Freeze}

// GuestPath is the switch file's path inside the guest.
const GuestPath = "/etc/guestlink-agent.yaml"

// MaxFileSize is the largest switch file read; a larger one counts as
// broken (every feature off).
const MaxFileSize = 64 << 10

// ErrDisabled is wrapped by Check's error for a feature switched off (or a
// broken switch file); the link port answers it 403.
var ErrDisabled = errors.New("feature switched off in the guest")

// Switch reads the switch file of one guest. The zero value is not
// usable: make one with New.
type Switch struct {
	path string // the file on this machine (under the guest's root)
}

// New returns the switch of the guest whose root is root ("/" on a VM).
func New(root string) *Switch {
	return &Switch{path: filepath.Join(root, GuestPath)}
}

type file struct {
	Features map[string]bool `yaml:"features"`
}

// load reads the file: the feature map (nil without a file) or why it is
// unusable.
func (s *Switch) load() (map[string]bool, error) {
	data, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", GuestPath, errors.Unwrap(err))
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("reading %s: larger than %d bytes", GuestPath, MaxFileSize)
	}
	var f file
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("parsing %s: %w", GuestPath, err)
	}
	for name := range f.Features {
		if !slices.Contains(Names, name) {
			return nil, fmt.Errorf("parsing %s: unknown feature %q (known: exec, files, state, freeze)", GuestPath, name)
		}
	}
	return f.Features, nil
}

// Check returns nil when the feature called name is on, and an error
// wrapping ErrDisabled that names the switch when it is off (or the switch
// file is broken). An unknown name is an error too: a handler asks only for
// the features of Names.
func (s *Switch) Check(name string) error {
	if !slices.Contains(Names, name) {
		return fmt.Errorf("unknown agent feature %q: %w", name, ErrDisabled)
	}
	on, err := s.load()
	if err != nil {
		return fmt.Errorf("agent feature %q is off: the switch file is unusable: %w: %w", name, err, ErrDisabled)
	}
	if v, ok := on[name]; ok && !v {
		return fmt.Errorf("agent feature %q is switched off in the guest (features.%s: false in %s): %w", name, name, GuestPath, ErrDisabled)
	}
	return nil
}

// Enabled returns the features that are on, in the order of Names.
func (s *Switch) Enabled() []string {
	var out []string
	for _, n := range Names {
		if s.Check(n) == nil {
			out = append(out, n)
		}
	}
	return out
}
