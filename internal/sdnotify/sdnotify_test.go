package sdnotify_test

import (
	"net"
	"path/filepath"
	"testing"

	"github.com/guestlink/guestlink/internal/sdnotify"
)

func TestNotify(t *testing.T) {
	for _, tc := range []struct {
		name     string
		abstract bool
	}{{"path", false}, {"abstract", true}} {
		t.Run(tc.name, func(t *testing.T) {
			addr := filepath.Join(t.TempDir(), "notify")
			env := addr
			if tc.abstract {
				addr = "\x00guestlink-sdnotify-test-" + filepath.Base(t.TempDir())
				env = "@" + addr[1:]
			}
			ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			t.Setenv(sdnotify.EnvSocket, env)
			sent, err := sdnotify.Notify(sdnotify.Ready)
			if err != nil || !sent {
				t.Fatalf("Notify = %v, %v", sent, err)
			}
			buf := make([]byte, 64)
			n, err := ln.Read(buf)
			if err != nil || string(buf[:n]) != "READY=1" {
				t.Fatalf("systemd got %q, %v", buf[:n], err)
			}
		})
	}
	t.Run("unset", func(t *testing.T) {
		t.Setenv(sdnotify.EnvSocket, "")
		if sent, err := sdnotify.Notify(sdnotify.Ready); sent || err != nil {
			t.Fatalf("Notify without systemd = %v, %v", sent, err)
		}
	})
	t.Run("gone", func(t *testing.T) {
		t.Setenv(sdnotify.EnvSocket, filepath.Join(t.TempDir(), "none"))
		if sent, err := sdnotify.Notify(sdnotify.Ready); sent || err == nil {
			t.Fatalf("Notify to a missing socket = %v, %v", sent, err)
		}
	})
}
