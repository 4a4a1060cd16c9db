package pluginhost

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// SumsFile is the name of the checksum file in a plugin directory. Its format
// is sha256sum's: one line per plugin, "<64 hex digits>  <file name>" (a "*"
// instead of the second space, binary mode, is accepted too), for instance
// written by
//
//	cd bin/plugins && sha256sum -- * > SHA256SUMS
//
// (run before SHA256SUMS exists, or exclude it). Blank lines and lines
// starting with "#" are ignored.
const SumsFile = "SHA256SUMS"

// ErrChecksum is the kind of a plugin rejected because its checksum is
// missing from SumsFile or does not match the binary.
var ErrChecksum = errors.New("plugin checksum rejected")

// ReadChecksums parses a SumsFile and returns the checksums by file name.
func ReadChecksums(path string) (map[string][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading checksums: %w", err)
	}
	return parseChecksums(path, data)
}

func parseChecksums(path string, data []byte) (map[string][]byte, error) {
	sums := map[string][]byte{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		hexSum, name, ok := strings.Cut(line, " ")
		if !ok || len(name) < 2 || (name[0] != ' ' && name[0] != '*') {
			return nil, fmt.Errorf("checksums %s line %d: want %q: %w", path, n, "<sha256>  <file>", ErrChecksum)
		}
		name = name[1:]
		sum, err := hex.DecodeString(hexSum)
		if err != nil || len(sum) != sha256.Size {
			return nil, fmt.Errorf("checksums %s line %d: %q is not a SHA-256 in hex: %w", path, n, hexSum, ErrChecksum)
		}
		if name != filepath.Base(name) || name == "." || name == ".." {
			return nil, fmt.Errorf("checksums %s line %d: %q is not a file name of the directory: %w", path, n, name, ErrChecksum)
		}
		sums[name] = sum
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading checksums %s: %w", path, err)
	}
	return sums, nil
}

// fileSum returns the SHA-256 of the file at path.
func fileSum(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

// WriteChecksums writes dir's SumsFile for every plugin in dir (each regular
// executable file that is not hidden), replacing any earlier one. The file
// is written to a temporary name first and renamed, with mode 0644.
func WriteChecksums(dir string) error {
	names, err := pluginFiles(dir)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	for _, name := range names {
		sum, err := fileSum(filepath.Join(dir, name))
		if err != nil {
			return fmt.Errorf("checksumming plugin %q: %w", name, err)
		}
		fmt.Fprintf(&buf, "%s  %s\n", hex.EncodeToString(sum), name)
	}
	tmp, err := os.CreateTemp(dir, "."+SumsFile+"-*")
	if err != nil {
		return fmt.Errorf("writing checksums: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(buf.Bytes()); err != nil {
		tmp.Close()
		return fmt.Errorf("writing checksums: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("writing checksums: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing checksums: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, SumsFile)); err != nil {
		return fmt.Errorf("writing checksums: %w", err)
	}
	return nil
}

// pluginFiles lists the plugins of dir: regular executable files, not
// hidden, other than SumsFile, sorted by name.
func pluginFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading plugin directory: %w", err)
	}
	var names []string
	for _, e := range entries {
		name := e.Name()
		if name == SumsFile || strings.HasPrefix(name, ".") {
			continue
		}
		info, err := os.Stat(filepath.Join(dir, name)) // follows symlinks
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // dangling symlink
			}
			return nil, fmt.Errorf("reading plugin %q: %w", name, err)
		}
		if !info.Mode().IsRegular() || info.Mode().Perm()&0o111 == 0 {
			continue
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return names, nil
}

// candidate is one discovered plugin: its checksum, or why it is rejected.
type candidate struct {
	name, path string
	sum        []byte
	rejected   error
}

// discover lists dir's plugins and checks each against SumsFile. The
// directory, SumsFile and every plugin binary must be trusted
// (CheckTrusted): otherwise discover fails and no plugin runs.
func discover(dir string) ([]candidate, error) {
	if err := CheckTrusted("plugin directory", dir); err != nil {
		return nil, err
	}
	names, err := pluginFiles(dir)
	if err != nil {
		return nil, err
	}
	sumsPath := filepath.Join(dir, SumsFile)
	if err := CheckTrusted("checksum file", sumsPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, name := range names {
		if err := CheckTrusted("plugin binary", filepath.Join(dir, name)); err != nil {
			return nil, err
		}
	}
	sums, sumsErr := ReadChecksums(sumsPath)
	out := make([]candidate, 0, len(names))
	for _, name := range names {
		out = append(out, check(dir, name, sums, sumsErr))
	}
	return out, nil
}

// verify checks one plugin of dir again as discover does, reading SumsFile
// anew (Restart: the administrator may have fixed the binary or its
// checksum). An untrusted path is an error; a checksum that is missing or
// wrong is the candidate's rejection.
func verify(dir, name string) (candidate, error) {
	if err := CheckTrusted("plugin directory", dir); err != nil {
		return candidate{}, err
	}
	sumsPath := filepath.Join(dir, SumsFile)
	if err := CheckTrusted("checksum file", sumsPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return candidate{}, err
	}
	if err := CheckTrusted("plugin binary", filepath.Join(dir, name)); err != nil {
		return candidate{}, err
	}
	sums, sumsErr := ReadChecksums(sumsPath)
	return check(dir, name, sums, sumsErr), nil
}

// check compares one plugin binary with its checksum in sums (read from
// dir's SumsFile, or sumsErr).
func check(dir, name string, sums map[string][]byte, sumsErr error) candidate {
	sumsPath := filepath.Join(dir, SumsFile)
	c := candidate{name: name, path: filepath.Join(dir, name)}
	switch want, ok := sums[name]; {
	case sumsErr != nil:
		c.rejected = fmt.Errorf("no usable %s: %w: %w", SumsFile, sumsErr, ErrChecksum)
	case !ok:
		c.rejected = fmt.Errorf("no checksum for %q in %s: %w", name, sumsPath, ErrChecksum)
	default:
		got, err := fileSum(c.path)
		switch {
		case err != nil:
			c.rejected = fmt.Errorf("checksumming %q: %w", c.path, err)
		case !bytes.Equal(got, want):
			c.rejected = fmt.Errorf("%s says sha256 %x for %q, the file has sha256 %x: %w", SumsFile, want, name, got, ErrChecksum)
		default:
			c.sum = want
		}
	}
	return c
}

// checksumChanged explains a binary refused at launch because its content
// no longer matches the checksum read at discovery: both hashes.
func checksumChanged(path string, want []byte, err error) error {
	got, herr := fileSum(path)
	if herr != nil {
		return fmt.Errorf("plugin binary %q: %s said sha256 %x, the file cannot be read (%v): %w", path, SumsFile, want, herr, err)
	}
	return fmt.Errorf("plugin binary %q changed: %s said sha256 %x, the file now has sha256 %x: %w", path, SumsFile, want, got, err)
}
