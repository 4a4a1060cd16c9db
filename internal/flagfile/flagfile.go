// Package flagfile sets a command's flags from a YAML file whose keys are
// the flag names: guestlinkd --config /etc/guestlink/guestlinkd.yaml. The
// command line wins over the environment, which wins over the file, which
// wins over the built-in defaults.
package flagfile

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"gopkg.in/yaml.v3"
)

// MaxSize is the largest file Apply reads.
const MaxSize = 1 << 20

// Options says how the file's keys meet the command's flags.
type Options struct {
	// Env maps a flag name to the environment variable that also sets it:
	// a key of the file is ignored while that variable is set.
	Env map[string]string
	// Repeatable names the flags that take a list (each item is one use
	// of the flag); any other flag takes one scalar.
	Repeatable map[string]bool
	// Skip names flags the file may not set (the one naming the file).
	Skip map[string]bool
	// Secret, if set, reports whether a key's value is a secret (a
	// database URL with a password, a join token): a file setting one
	// must not be readable by others.
	Secret func(key, value string) bool
}

// Apply reads the YAML mapping at path and sets each flag of fs it names
// that the command line did not set (fs must be parsed) and whose
// environment variable is unset. The file must not be writable by anyone
// but its owner, who must be root or the current user: it chooses the
// database, the plugins and the listeners. A file setting a value that
// opts.Secret reports as a secret, even one the command line overrides,
// must not be readable by others. Errors name the file and the key.
func Apply(fs *flag.FlagSet, path string, opts Options) error {
	data, perm, err := readTrusted(path)
	if err != nil {
		return err
	}
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	for _, key := range slices.Sorted(maps.Keys(doc)) {
		if fs.Lookup(key) == nil || opts.Skip[key] {
			return fmt.Errorf("config file %s: unknown key %q (the keys are the flags' names: %s)", path, key, strings.Join(names(fs, opts.Skip), ", "))
		}
		values, err := scalars(doc[key], opts.Repeatable[key])
		if err != nil {
			return fmt.Errorf("config file %s: %s: %w", path, key, err)
		}
		if opts.Secret != nil && perm&0o004 != 0 && slices.ContainsFunc(values, func(v string) bool { return opts.Secret(key, v) }) {
			return fmt.Errorf("config file %s: %s holds a secret and the file is readable by others (mode %04o): chmod o-r %s", path, key, perm, path)
		}
		if explicit[key] || (opts.Env[key] != "" && os.Getenv(opts.Env[key]) != "") {
			continue
		}
		for _, v := range values {
			if err := fs.Set(key, v); err != nil {
				return fmt.Errorf("config file %s: %s: %w", path, key, err)
			}
		}
	}
	return nil
}

// readTrusted reads path after checking who may have written it, and
// returns its permission bits.
func readTrusted(path string) ([]byte, os.FileMode, error) {
	// O_NONBLOCK: opening a FIFO must not wait for a writer.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("config file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("config file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("config file %s: not a regular file", path)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return nil, 0, fmt.Errorf("config file %s: writable by group or others (mode %04o): chmod go-w %s", path, fi.Mode().Perm(), path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return nil, 0, fmt.Errorf("config file %s: owned by uid %d, neither root nor this user (uid %d)", path, st.Uid, os.Geteuid())
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, 0, fmt.Errorf("config file %s: %w", path, err)
	}
	if len(data) > MaxSize {
		return nil, 0, fmt.Errorf("config file %s: larger than %d bytes", path, MaxSize)
	}
	return data, fi.Mode().Perm(), nil
}

// scalars turns a key's YAML value into the flag's text values.
func scalars(v any, repeatable bool) ([]string, error) {
	if list, ok := v.([]any); ok {
		if !repeatable {
			return nil, errors.New("takes one value, not a list")
		}
		out := make([]string, 0, len(list))
		for _, item := range list {
			s, err := scalar(item)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
		return out, nil
	}
	s, err := scalar(v)
	if err != nil {
		return nil, err
	}
	return []string{s}, nil
}

// scalar formats one YAML scalar as the flag parses it.
func scalar(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case bool:
		return strconv.FormatBool(v), nil
	case int:
		return strconv.Itoa(v), nil
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64), nil
	case nil:
		return "", errors.New("no value")
	default:
		return "", fmt.Errorf("want a string, number or boolean, not %T", v)
	}
}

// names lists the flags a file may set.
func names(fs *flag.FlagSet, skip map[string]bool) []string {
	var out []string
	fs.VisitAll(func(f *flag.Flag) {
		if !skip[f.Name] {
			out = append(out, f.Name)
		}
	})
	return out
}
