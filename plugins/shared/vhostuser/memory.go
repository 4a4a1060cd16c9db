package vhostuser

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ErrOutOfBounds is wrapped by every error about an address or length that
// falls outside the guest memory the back-end was given.
var ErrOutOfBounds = errors.New("address outside the guest memory")

// Region is one mapped piece of guest memory.
type Region struct {
	// GuestPhys is the guest-physical address of Data[0] (what descriptors hold).
	GuestPhys uint64
	// UserAddr is the front-end's virtual address of Data[0] (what SET_VRING_ADDR holds).
	UserAddr uint64
	// Data is the region's memory.
	Data []byte

	mapping []byte // the whole mmap, unmapped by Close; nil for memory not mapped here
}

// Memory is a guest memory table: the regions of one SET_MEM_TABLE.
type Memory struct {
	regions []Region
}

// NewMemory returns a table over regions the caller owns (tests and fuzz
// targets use plain byte slices as guest memory). Overlapping regions are
// refused.
func NewMemory(regions ...Region) (*Memory, error) {
	m := &Memory{regions: regions}
	for i, r := range regions {
		if uint64(len(r.Data)) == 0 || r.GuestPhys+uint64(len(r.Data)) < r.GuestPhys || r.UserAddr+uint64(len(r.Data)) < r.UserAddr {
			return nil, fmt.Errorf("%w: region %d: empty or wrapping", ErrProtocol, i)
		}
		for j := range i {
			if overlap(r.GuestPhys, uint64(len(r.Data)), regions[j].GuestPhys, uint64(len(regions[j].Data))) {
				return nil, fmt.Errorf("%w: region %d overlaps region %d in guest-physical space", ErrProtocol, i, j)
			}
		}
	}
	return m, nil
}

func overlap(a, alen, b, blen uint64) bool {
	return a < b+blen && b < a+alen
}

// mapRegions mmaps the regions of a SET_MEM_TABLE, one fd each. It closes
// the fds (the mappings keep the memory).
func mapRegions(descs []RegionDesc, fds []int) (*Memory, error) {
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	if len(fds) != len(descs) {
		return nil, fmt.Errorf("%w: SET_MEM_TABLE: %d regions with %d fds", ErrProtocol, len(descs), len(fds))
	}
	var regions []Region
	fail := func(err error) (*Memory, error) {
		for _, r := range regions {
			unix.Munmap(r.mapping)
		}
		return nil, err
	}
	for i, d := range descs {
		total := d.Size + d.MmapOffset
		if d.Size == 0 || total < d.Size || total > 1<<46 || d.MmapOffset%uint64(os.Getpagesize()) != 0 {
			return fail(fmt.Errorf("%w: SET_MEM_TABLE: region %d: size %#x at offset %#x", ErrProtocol, i, d.Size, d.MmapOffset))
		}
		var st unix.Stat_t
		if err := unix.Fstat(fds[i], &st); err != nil {
			return fail(fmt.Errorf("stat of memory region %d: %w", i, err))
		}
		// A mapping past the end of the file would fault (SIGBUS) on access.
		if st.Mode&unix.S_IFMT == unix.S_IFREG && uint64(st.Size) < total {
			return fail(fmt.Errorf("%w: SET_MEM_TABLE: region %d ends at %#x past its file's %#x bytes", ErrProtocol, i, total, st.Size))
		}
		b, err := unix.Mmap(fds[i], 0, int(total), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			return fail(fmt.Errorf("mapping memory region %d (%d bytes): %w", i, total, err))
		}
		regions = append(regions, Region{GuestPhys: d.GuestPhys, UserAddr: d.UserAddr, Data: b[d.MmapOffset:], mapping: b})
	}
	m, err := NewMemory(regions...)
	if err != nil {
		return fail(err)
	}
	return m, nil
}

// Close unmaps the regions this table mapped.
func (m *Memory) Close() {
	if m == nil {
		return
	}
	for _, r := range m.regions {
		if r.mapping != nil {
			unix.Munmap(r.mapping)
		}
	}
	m.regions = nil
}

// Slice returns the n bytes of guest memory at guest-physical address gpa.
// The range must lie in one region.
func (m *Memory) Slice(gpa, n uint64) ([]byte, error) {
	for _, r := range m.regions {
		if b, ok := within(r.Data, r.GuestPhys, gpa, n); ok {
			return b, nil
		}
	}
	return nil, fmt.Errorf("%w: guest-physical %#x+%d", ErrOutOfBounds, gpa, n)
}

// sliceUser is Slice for a front-end virtual address.
func (m *Memory) sliceUser(ua, n uint64) ([]byte, error) {
	for _, r := range m.regions {
		if b, ok := within(r.Data, r.UserAddr, ua, n); ok {
			return b, nil
		}
	}
	return nil, fmt.Errorf("%w: front-end address %#x+%d", ErrOutOfBounds, ua, n)
}

func within(data []byte, base, addr, n uint64) ([]byte, bool) {
	size := uint64(len(data))
	if addr < base || addr-base > size || n > size-(addr-base) {
		return nil, false
	}
	off := addr - base
	return data[off : off+n : off+n], true
}
