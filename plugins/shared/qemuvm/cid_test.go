package qemuvm

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestPickCID(t *testing.T) {
	other := errors.New("permission denied")
	tests := []struct {
		name      string
		preferred uint32
		taken     map[uint32]bool
		fail      error
		want      uint32
		wantErr   error
	}{
		{"preferred free", 42, nil, nil, 42, nil},
		{"preferred taken", 42, map[uint32]bool{42: true}, nil, 100, nil},
		{"preferred invalid", 2, nil, nil, 100, nil},
		{"preferred any", 0xffffffff, nil, nil, 100, nil},
		{"random taken too", 42, map[uint32]bool{42: true, 100: true}, nil, 101, nil},
		{"other error", 42, nil, other, 0, other},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next := uint32(99)
			var tried []uint32
			set := func(cid uint32) error {
				tried = append(tried, cid)
				if tt.fail != nil {
					return tt.fail
				}
				if tt.taken[cid] {
					return syscall.EADDRINUSE
				}
				return nil
			}
			got, err := pickCID(set, tt.preferred, func() uint32 { next++; return next })
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("pickCID = %d, %v (tried %v), want %d", got, err, tried, tt.want)
			}
		})
	}
	t.Run("all taken", func(t *testing.T) {
		n := 0
		_, err := pickCID(func(uint32) error { n++; return syscall.EADDRINUSE }, 5, randomCID)
		if !errors.Is(err, syscall.EADDRINUSE) || n != cidTries {
			t.Fatalf("err %v after %d tries", err, n)
		}
	})
	t.Run("random in range", func(t *testing.T) {
		for range 1000 {
			if c := randomCID(); c < MinGuestCID || c > MaxGuestCID {
				t.Fatalf("randomCID = %d", c)
			}
		}
	})
}

// TestReserveCID reserves a CID through the real device when the machine
// has /dev/vhost-vsock; either way it checks the errors of a device that
// is missing (the message names the path and the two ways out) and of a
// file that is not the device (the real ioctl, refused with ENOTTY).
func TestReserveCID(t *testing.T) {
	t.Run("missing device", func(t *testing.T) {
		dev := filepath.Join(t.TempDir(), "vhost-vsock")
		_, err := ReserveCID(dev, 0)
		if !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("ReserveCID(%s): %v, want ErrNotExist", dev, err)
		}
		for _, want := range []string{dev, "modprobe vhost_vsock", KeyVsock + "=" + VsockUser} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("ReserveCID(%s): %q lacks %q", dev, err, want)
			}
		}
	})
	t.Run("not the device", func(t *testing.T) {
		_, err := ReserveCID(os.DevNull, 42)
		if !errors.Is(err, syscall.ENOTTY) || !strings.Contains(err.Error(), "setting guest CID 42") {
			t.Fatalf("ReserveCID(%s): %v, want the ioctl's ENOTTY for CID 42", os.DevNull, err)
		}
	})
	t.Run(VhostVsockDevice, func(t *testing.T) {
		if _, err := os.Stat(VhostVsockDevice); err != nil {
			// The error a start with qemu.vsock=kernel would meet here.
			_, err := ReserveCID(VhostVsockDevice, 0)
			if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), VhostVsockDevice) {
				t.Fatalf("ReserveCID without %s: %v", VhostVsockDevice, err)
			}
			t.Logf("no %s on this machine: checked its error, %v", VhostVsockDevice, err)
			return
		}
		r, err := ReserveCID(VhostVsockDevice, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if r.CID < MinGuestCID {
			t.Fatalf("reserved CID %d", r.CID)
		}
		r2, err := ReserveCID(VhostVsockDevice, r.CID)
		if err != nil {
			t.Fatal(err)
		}
		defer r2.Close()
		if r2.CID == r.CID {
			t.Fatal("a reserved CID was handed out twice")
		}
	})
}
