package fsfreeze

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// Mount is one line of /proc/self/mountinfo.
type Mount struct {
	ID       int    // mount id
	Parent   int    // parent mount id
	Dev      string // "major:minor" of the filesystem
	Dir      string // mount point, unescaped
	FSType   string // "ext4"
	Source   string // "/dev/vda1", "proc", "tmpfs"
	ReadOnly bool   // mounted read-only (the mount's or the superblock's options)
}

// ParseMountInfo reads the mount table in the format of
// /proc/self/mountinfo (proc(5)), in mount order.
func ParseMountInfo(r io.Reader) ([]Mount, error) {
	var out []Mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		m, err := parseMountLine(line)
		if err != nil {
			return nil, fmt.Errorf("mountinfo line %d: %w", n, err)
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading mountinfo: %w", err)
	}
	return out, nil
}

// parseMountLine reads "36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 -
// ext3 /dev/root rw,errors=continue".
func parseMountLine(line string) (Mount, error) {
	pre, post, ok := strings.Cut(line, " - ")
	if !ok {
		return Mount{}, fmt.Errorf("no \" - \" separator")
	}
	f := strings.Fields(pre)
	g := strings.Fields(post)
	if len(f) < 6 || len(g) < 2 {
		return Mount{}, fmt.Errorf("too few fields")
	}
	id, err := strconv.Atoi(f[0])
	if err != nil {
		return Mount{}, fmt.Errorf("mount id %q: %w", f[0], err)
	}
	parent, err := strconv.Atoi(f[1])
	if err != nil {
		return Mount{}, fmt.Errorf("parent id %q: %w", f[1], err)
	}
	if !strings.Contains(f[2], ":") {
		return Mount{}, fmt.Errorf("device %q is not major:minor", f[2])
	}
	m := Mount{ID: id, Parent: parent, Dev: f[2], Dir: unescape(f[4]), FSType: g[0], Source: unescape(g[1])}
	m.ReadOnly = slices.Contains(strings.Split(f[5], ","), "ro")
	if len(g) > 2 && slices.Contains(strings.Split(g[2], ","), "ro") {
		m.ReadOnly = true
	}
	return m, nil
}

// unescape undoes the kernel's octal escapes of mountinfo (\040 for a
// space, \011, \012, \134).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// networkFS are filesystem types that are not the guest's own (network or
// shared with the host): never frozen, as qemu-guest-agent skips smbfs
// and cifs.
var networkFS = []string{"nfs", "nfs4", "cifs", "smbfs", "smb3", "ceph", "glusterfs", "9p", "virtiofs", "afs", "lustre"}

// Skip says why a mounted filesystem is not frozen.
type Skip struct {
	Dir    string `json:"dir"`
	Reason string `json:"reason"`
}

// Plan returns the mounts to freeze, in mount order with "/" first (it is
// frozen last and thawed first), and the mounts left alone with why. As
// qemu-guest-agent's fsfreeze does, only filesystems backed by a device
// path (a source starting with "/") are frozen, which leaves out pseudo
// filesystems (proc, sysfs, tmpfs, cgroup, devtmpfs...); network and
// shared filesystems, FUSE, read-only mounts and further mounts of a
// filesystem already planned (bind mounts) are left out too.
func Plan(mounts []Mount) (freeze []Mount, skipped []Skip) {
	seen := map[string]bool{}
	for _, m := range mounts {
		why := ""
		switch {
		case !strings.HasPrefix(m.Source, "/"):
			why = "pseudo filesystem (" + m.FSType + ")"
		case slices.Contains(networkFS, m.FSType):
			why = "network or shared filesystem (" + m.FSType + ")"
		case m.FSType == "fuse" || strings.HasPrefix(m.FSType, "fuse."):
			why = "FUSE filesystem (" + m.FSType + ")"
		case m.ReadOnly:
			why = "read-only"
		case seen[m.Dev]:
			why = "another mount of a filesystem already frozen (" + m.Dev + ")"
		}
		if why != "" {
			if strings.HasPrefix(m.Source, "/") {
				// Pseudo filesystems are many and unremarkable: only the
				// skipped device-backed mounts are reported.
				skipped = append(skipped, Skip{Dir: m.Dir, Reason: why})
			}
			continue
		}
		seen[m.Dev] = true
		freeze = append(freeze, m)
	}
	slices.SortStableFunc(freeze, func(a, b Mount) int {
		switch {
		case a.Dir == "/" && b.Dir != "/":
			return -1
		case b.Dir == "/" && a.Dir != "/":
			return 1
		}
		return 0
	})
	return freeze, skipped
}
