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
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
	on, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", GuestPath, err)
	}
	return on, nil
}

// Parse reads a switch file: the YAML block mapping "features:" of feature
// names to true or false, with comments and blank lines. It is a parser of
// that one shape rather than a YAML library, so that the agent links no
// YAML module; anything else is an error (which turns every feature off).
func Parse(data []byte) (map[string]bool, error) {
	on := map[string]bool{}
	inFeatures := false
	for i, raw := range strings.Split(string(data), "\n") {
		line := raw
		if c := strings.Index(line, "#"); c >= 0 {
			line = line[:c]
		}
		line = strings.TrimRight(line, " \t\r")
		if strings.TrimSpace(line) == "" || strings.TrimSpace(line) == "---" {
			continue
		}
		indented := line[0] == ' ' || line[0] == '\t'
		key, val, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			return nil, fmt.Errorf("line %d: want \"key: value\"", i+1)
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		if !indented {
			if key != "features" || val != "" {
				return nil, fmt.Errorf("line %d: unknown key %q (want features: and one feature per line below it)", i+1, key)
			}
			inFeatures = true
			continue
		}
		if !inFeatures {
			return nil, fmt.Errorf("line %d: indented line outside features:", i+1)
		}
		if !slices.Contains(Names, key) {
			return nil, fmt.Errorf("line %d: unknown feature %q (known: exec, files, state, freeze)", i+1, key)
		}
		switch val {
		case "true":
			on[key] = true
		case "false":
			on[key] = false
		default:
			return nil, fmt.Errorf("line %d: feature %q: want true or false, not %q", i+1, key, val)
		}
	}
	return on, nil
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
