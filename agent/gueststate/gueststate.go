// Package gueststate collects what the agent reports of its guest for GET
// /1.0/state on the link port: network interfaces and their addresses,
// memory, root file system and process count (LXD's InstanceState shape)
// and the OS facts (/etc/os-release NAME and VERSION, host name, kernel
// release). Everything is read when asked, from /proc and the kernel, so
// an address change shows at the next request; the daemon caches answers.
package gueststate

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/guestlink/guestlink/api"
)

// Collector reads the state of the guest whose root is Root ("/" on a VM;
// a simulated guest's directory, whose os-release it reads while the rest
// is its host's).
type Collector struct {
	Root string
}

// Collect returns the guest's state. A part that cannot be read is left
// empty; only a guest whose interfaces cannot be listed fails.
func (c *Collector) Collect() (*api.GuestState, error) {
	st := &api.GuestState{Network: map[string]api.GuestNetwork{}, Disk: map[string]api.GuestDisk{}}
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("listing network interfaces: %w", err)
	}
	for _, ifc := range ifs {
		st.Network[ifc.Name] = network(ifc)
	}
	st.Memory = memory()
	var fsst syscall.Statfs_t
	if err := syscall.Statfs(c.root(), &fsst); err == nil {
		total := int64(fsst.Blocks) * fsst.Bsize
		st.Disk["root"] = api.GuestDisk{Total: total, Usage: total - int64(fsst.Bfree)*fsst.Bsize}
	}
	st.Processes = processes()
	st.OS, st.OSVersion = osRelease(c.root())
	st.Hostname, _ = os.Hostname()
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		st.Kernel = strings.TrimSpace(string(b))
	}
	if c.root() == "/" {
		// Only a VM's /proc is its own: a simulated guest would report
		// its host's kills.
		st.OOMKills = oomKills("/proc/vmstat")
	}
	return st, nil
}

// oomKills reads the oom_kill counter of a vmstat file (Linux 4.13 and
// later; 0 without one).
func oomKills(path string) uint64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "oom_kill "); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

func (c *Collector) root() string {
	if c.Root == "" {
		return "/"
	}
	return c.Root
}

func network(ifc net.Interface) api.GuestNetwork {
	n := api.GuestNetwork{Hwaddr: ifc.HardwareAddr.String(), MTU: ifc.MTU, State: "down", Type: "broadcast", Addresses: []api.GuestAddress{}}
	if ifc.Flags&net.FlagUp != 0 {
		n.State = "up"
	}
	if ifc.Flags&net.FlagLoopback != 0 {
		n.Type = "loopback"
	}
	addrs, _ := ifc.Addrs()
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ones, _ := ipn.Mask.Size()
		ga := api.GuestAddress{Family: "inet6", Address: ipn.IP.String(), Netmask: strconv.Itoa(ones), Scope: "global"}
		if ipn.IP.To4() != nil {
			ga.Family = "inet"
		}
		switch {
		case ipn.IP.IsLoopback():
			ga.Scope = "local"
		case ipn.IP.IsLinkLocalUnicast():
			ga.Scope = "link"
		}
		n.Addresses = append(n.Addresses, ga)
	}
	return n
}

// memory reads MemTotal and MemAvailable of /proc/meminfo.
func memory() api.GuestMemory {
	var m api.GuestMemory
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return m
	}
	defer f.Close()
	var avail int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(val), " kB"), 10, 64)
		if err != nil {
			continue
		}
		switch key {
		case "MemTotal":
			m.Total = kb << 10
		case "MemAvailable":
			avail = kb << 10
		}
	}
	m.Usage = m.Total - avail
	return m
}

// processes counts the numeric entries of /proc.
func processes() int64 {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err == nil && e.IsDir() {
			n++
		}
	}
	return n
}

// MaxOSRelease is the most of os-release read.
const MaxOSRelease = 64 << 10

// osRelease reads NAME and VERSION of root's /etc/os-release (else
// /usr/lib/os-release), as os-release(5) says: shell-like assignments,
// values optionally quoted. The file is opened under root: a symlink that
// leads out of it is not followed.
func osRelease(root string) (name, version string) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return "", ""
	}
	defer r.Close()
	var data []byte
	for _, p := range []string{"etc/os-release", "usr/lib/os-release"} {
		f, err := r.Open(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", ""
		}
		buf := make([]byte, MaxOSRelease)
		n, _ := f.Read(buf)
		f.Close()
		data = buf[:n]
		break
	}
	return ParseOSRelease(data)
}

// ParseOSRelease returns NAME and VERSION of an os-release file.
func ParseOSRelease(data []byte) (name, version string) {
	for _, line := range bytes.Split(data, []byte("\n")) {
		k, v, ok := strings.Cut(strings.TrimSpace(string(line)), "=")
		if !ok || strings.HasPrefix(k, "#") {
			continue
		}
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
			v = strings.NewReplacer(`\"`, `"`, `\\`, `\`, `\$`, `$`, "\\`", "`").Replace(v)
		}
		switch k {
		case "NAME":
			name = v
		case "VERSION":
			version = v
		}
	}
	return name, version
}
