package e2e

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestNotifiesSystemd: started by systemd (NOTIFY_SOCKET set, as by the
// Type=notify unit of the host package), guestlinkd sends READY=1 once its
// admin socket answers, and its plugins do not inherit the socket.
func TestNotifiesSystemd(t *testing.T) {
	addr := filepath.Join(t.TempDir(), "notify")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	t.Setenv("NOTIFY_SOCKET", addr)
	d := newDaemon(t)
	_ = ln.SetReadDeadline(time.Now().Add(time.Minute))
	buf := make([]byte, 64)
	n, err := ln.Read(buf)
	if err != nil || string(buf[:n]) != "READY=1" {
		t.Fatalf("systemd got %q, %v; want READY=1", buf[:n], err)
	}
	if _, err := os.Stat(filepath.Join(d.stateDir, "guestlink.sock")); err != nil {
		t.Fatalf("READY=1 before the admin socket exists: %v", err)
	}
	// The daemon's own /proc environ keeps what it started with; its
	// children (the plugins) must not have the socket.
	children := 0
	for _, p := range procsUnder(d.stateDir) {
		if p.pid == d.pid() {
			continue
		}
		children++
		env, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.pid), "environ"))
		if err == nil && strings.Contains(string(env), "NOTIFY_SOCKET=") {
			t.Errorf("process %d (%s) inherited NOTIFY_SOCKET", p.pid, p.cmdline)
		}
	}
	if children == 0 {
		t.Fatalf("no plugin process found under %s", d.stateDir)
	}
}
