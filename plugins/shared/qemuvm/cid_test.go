package qemuvm

import (
	"errors"
	"os"
	"path/filepath"
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

// TestReserveCIDRequiresDevice runs the real ioctl when the machine has
// /dev/vhost-vsock, and checks the error otherwise.
func TestReserveCIDRequiresDevice(t *testing.T) {
	if _, err := os.Stat(VhostVsockDevice); err != nil {
		if _, err := ReserveCID(filepath.Join(t.TempDir(), "none"), 0); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("ReserveCID without device: %v, want ErrNotExist", err)
		}
		// A kernel device no package provides: a plain skip even with CI=true.
		t.Skipf("no %s on this machine: the ioctl itself is not exercised", VhostVsockDevice)
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
}
