package qemuvm

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"syscall"
	"unsafe"
)

// VhostVsockDevice is the device through which vsock guest CIDs are
// reserved. This file is the one home of CID reservation.
const VhostVsockDevice = "/dev/vhost-vsock"

// vhostVsockSetGuestCID is VHOST_VSOCK_SET_GUEST_CID: _IOW(0xAF, 0x60, __u64).
const vhostVsockSetGuestCID = 0x4008af60

// Guest CIDs: 0-2 are reserved (hypervisor, local, host) and 0xffffffff is
// VMADDR_CID_ANY.
const (
	MinGuestCID = 3
	MaxGuestCID = 0xfffffffe
)

// cidTries is how many CIDs ReserveCID tries before giving up.
const cidTries = 64

// CIDReservation is a vsock guest CID held by an open vhost-vsock file: the
// CID stays reserved while File is open. The backend passes File to QEMU
// (-device vhost-vsock-pci,vhostfd=N) and keeps CID in its handle; the
// daemon stores it in volatile.vsock_id.
type CIDReservation struct {
	File *os.File
	CID  uint32
}

// Close releases the reservation (QEMU keeps its own copy of the file).
func (r *CIDReservation) Close() error { return r.File.Close() }

// ReserveCID opens the vhost-vsock device dev and reserves a guest CID with
// VHOST_VSOCK_SET_GUEST_CID: preferred when it is a valid guest CID and free
// (so a guest keeps its volatile.vsock_id across restarts), else a random
// one, picking another on EADDRINUSE.
func ReserveCID(dev string, preferred uint32) (*CIDReservation, error) {
	f, err := os.OpenFile(dev, os.O_RDWR|syscall.O_CLOEXEC, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("reserving vsock CID: %w (the kernel's vhost-vsock: modprobe vhost_vsock, or %s=%s for guestlink's own device)", err, KeyVsock, VsockUser)
	}
	if err != nil {
		return nil, fmt.Errorf("reserving vsock CID: %w", err)
	}
	cid, err := pickCID(func(cid uint32) error { return setGuestCID(f, cid) }, preferred, randomCID)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("reserving vsock CID on %s: %w", dev, err)
	}
	return &CIDReservation{File: f, CID: cid}, nil
}

func randomCID() uint32 { return MinGuestCID + rand.Uint32N(MaxGuestCID-MinGuestCID+1) }

// pickCID tries set with preferred (when valid) and then with CIDs from
// random until one is not EADDRINUSE.
func pickCID(set func(uint32) error, preferred uint32, random func() uint32) (uint32, error) {
	var err error
	for i := range cidTries {
		cid := preferred
		if i > 0 || cid < MinGuestCID || cid > MaxGuestCID {
			cid = random()
		}
		err = set(cid)
		if err == nil {
			return cid, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return 0, fmt.Errorf("setting guest CID %d: %w", cid, err)
		}
	}
	return 0, fmt.Errorf("no free guest CID in %d tries: %w", cidTries, err)
}

// setGuestCID issues VHOST_VSOCK_SET_GUEST_CID on f.
func setGuestCID(f *os.File, cid uint32) error {
	v := uint64(cid)
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, vhostVsockSetGuestCID, uintptr(unsafe.Pointer(&v)))
	}); err != nil {
		return err
	}
	if errno != 0 {
		return errno
	}
	return nil
}
