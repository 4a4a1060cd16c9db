package guestimage

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	"github.com/cavaliergopher/cpio"
)

// entry is one member of a cpio archive.
type entry struct {
	name string
	mode cpio.FileMode
	data []byte
	rdev [2]int // major, minor for device nodes
}

// writeArchive writes entries as a newc archive, parents before children.
// cavaliergopher/cpio does not write the rdev fields device nodes need, so
// the "dev" directory and its device nodes are written first by hand (each
// newc member ends 4-byte aligned), the rest through cpio.Writer.
func writeArchive(w io.Writer, entries []entry) error {
	have := map[string]bool{}
	for _, e := range entries {
		have[e.name] = true
	}
	for _, e := range entries {
		for d := path.Dir(e.name); d != "." && d != "/"; d = path.Dir(d) {
			if !have[d] {
				have[d] = true
				entries = append(entries, entry{name: d, mode: cpio.TypeDir | 0o755})
			}
		}
	}
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	seen := map[string]bool{}
	var devs, rest []entry
	for _, e := range entries {
		if seen[e.name] {
			continue
		}
		seen[e.name] = true
		if e.mode&^0o7777 == cpio.TypeChar || (e.name == "dev" && hasDevices(entries)) {
			devs = append(devs, e)
		} else {
			rest = append(rest, e)
		}
	}
	for _, e := range devs {
		if err := writeNewcHeader(w, e); err != nil {
			return fmt.Errorf("writing %s to cpio: %w", e.name, err)
		}
	}
	cw := cpio.NewWriter(w)
	for _, e := range rest {
		h := &cpio.Header{Name: e.name, Mode: e.mode, Size: int64(len(e.data)), Links: 1}
		if e.mode&^0o7777 == cpio.TypeDir {
			h.Links = 2
		}
		if err := cw.WriteHeader(h); err != nil {
			return fmt.Errorf("writing %s to cpio: %w", e.name, err)
		}
		if len(e.data) > 0 {
			if _, err := cw.Write(e.data); err != nil {
				return fmt.Errorf("writing %s to cpio: %w", e.name, err)
			}
		}
	}
	return cw.Close()
}

func hasDevices(entries []entry) bool {
	for _, e := range entries {
		if e.mode&^0o7777 == cpio.TypeChar {
			return true
		}
	}
	return false
}

// writeNewcHeader writes a data-less newc member (a directory or a device
// node with its rdev major and minor).
func writeNewcHeader(w io.Writer, e entry) error {
	links := 1
	if e.mode&^0o7777 == cpio.TypeDir {
		links = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		0, uint32(e.mode), 0, 0, links, 0, 0, 0, 0, e.rdev[0], e.rdev[1], len(e.name)+1, 0)
	b := append([]byte(hdr), e.name...)
	b = append(b, 0)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	_, err := w.Write(b)
	return err
}

// layoutVersion is mixed into the initramfs digest; bump it when the way
// entries are written changes, so cached images are rebuilt.
const layoutVersion = "guestimage/2"

func digest(entries []entry) string {
	es := append([]entry(nil), entries...)
	sort.SliceStable(es, func(i, j int) bool { return es[i].name < es[j].name })
	h := sha256.New()
	io.WriteString(h, layoutVersion)
	for _, e := range es {
		fmt.Fprintf(h, "%s\x00%o\x00%d\x00%v\x00", e.name, e.mode, len(e.data), e.rdev)
		h.Write(e.data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// ConfigFile is one file of a config drive.
type ConfigFile struct {
	Path string // relative, slash separated
	Mode uint32 // permission bits
	Data []byte
}

// ConfigDir is where the config drive's files appear in the guest before
// /init copies them to the agent's config directory.
const ConfigDir = "config"

// WriteConfigArchive writes files as an uncompressed newc cpio archive whose
// members live under /config. Appended to an initramfs (at a 4-byte
// boundary), the kernel unpacks it over the base archive. Paths must be
// relative and stay inside the drive.
func WriteConfigArchive(w io.Writer, files []ConfigFile) error {
	entries := []entry{{name: ConfigDir, mode: cpio.TypeDir | 0o700}}
	dirs := map[string]bool{}
	for _, f := range files {
		clean := path.Clean(f.Path)
		if f.Path == "" || path.IsAbs(f.Path) || clean == "." || clean == ".." || strings.HasPrefix(clean, "../") || strings.Contains(f.Path, "\x00") {
			return fmt.Errorf("config file %q: path must be relative and inside the drive", f.Path)
		}
		if f.Mode&^0o777 != 0 {
			return fmt.Errorf("config file %q: mode %o is not permission bits", f.Path, f.Mode)
		}
		for d := path.Dir(clean); d != "."; d = path.Dir(d) {
			if !dirs[d] {
				dirs[d] = true
				entries = append(entries, entry{name: ConfigDir + "/" + d, mode: cpio.TypeDir | 0o700})
			}
		}
		entries = append(entries, entry{name: ConfigDir + "/" + clean, mode: cpio.TypeReg | cpio.FileMode(f.Mode), data: f.Data})
	}
	return writeArchive(w, entries)
}
