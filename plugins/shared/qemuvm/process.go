package qemuvm

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// procStartTime returns the start time (clock ticks since boot) of pid from
// /proc/<pid>/stat, and whether the process exists and is not a zombie.
func procStartTime(pid int) (uint64, bool) {
	if pid <= 0 {
		return 0, false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name is in parentheses and may hold spaces: split after it.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	fields := strings.Fields(string(b[i+1:]))
	// fields[0] is the state (field 3), starttime is field 22.
	if len(fields) < 20 || fields[0] == "Z" || fields[0] == "X" {
		return 0, false
	}
	st, err := strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return 0, false
	}
	return st, true
}

// processMatches reports whether pid is alive, started at start, and is the
// QEMU of the guest with uuid: its command line holds the exact argument
// pair "-uuid <uuid>" QEMU is started with. A zero start time never matches,
// so a handle without one cannot designate an arbitrary process.
func processMatches(pid int, start uint64, uuid string) bool {
	if start == 0 || uuid == "" {
		return false
	}
	st, ok := procStartTime(pid)
	if !ok || st != start {
		return false
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	return bytes.Contains(cmdline, []byte("\x00-uuid\x00"+uuid+"\x00"))
}

// tail returns the last n bytes of a file, trimmed, for error messages.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-n, 0)
	b := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
