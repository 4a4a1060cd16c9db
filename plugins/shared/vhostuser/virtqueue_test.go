package vhostuser_test

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/guestlink/guestlink/plugins/shared/vhostuser"
)

// Ring layout of the chain tests: one 64 KiB region at guest-physical
// 0x10000, a queue of 8 entries.
const (
	memBase   = 0x10000
	memLen    = 0x10000
	qSize     = 8
	descAt    = memBase
	availAt   = memBase + 0x200
	usedAt    = memBase + 0x400
	dataAt    = memBase + 0x1000
	indirAt   = memBase + 0x800
	descWrite = 2
)

type desc struct {
	addr  uint64
	n     uint32
	flags uint16
	next  uint16
}

// ring builds guest memory with table (at descAt) and indirect (at
// indirAt), and the available ring holding heads.
func ring(t testing.TB, table, indirect []desc, availIdx uint16, heads ...uint16) (*vhostuser.Queue, []byte) {
	mem := make([]byte, memLen)
	put := func(at uint64, ds []desc) {
		for i, d := range ds {
			b := mem[at-memBase+16*uint64(i):]
			binary.LittleEndian.PutUint64(b, d.addr)
			binary.LittleEndian.PutUint32(b[8:], d.n)
			binary.LittleEndian.PutUint16(b[12:], d.flags)
			binary.LittleEndian.PutUint16(b[14:], d.next)
		}
	}
	put(descAt, table)
	put(indirAt, indirect)
	binary.LittleEndian.PutUint16(mem[availAt-memBase+2:], availIdx)
	for i, h := range heads {
		binary.LittleEndian.PutUint16(mem[availAt-memBase+4+2*i:], h)
	}
	m, err := vhostuser.NewMemory(vhostuser.Region{GuestPhys: memBase, UserAddr: memBase, Data: mem})
	if err != nil {
		t.Fatal(err)
	}
	q, err := vhostuser.NewQueue(m, qSize, descAt, availAt, usedAt, true)
	if err != nil {
		t.Fatal(err)
	}
	return q, mem
}

func TestPopChains(t *testing.T) {
	next, indirect := uint16(1), uint16(4)
	tests := []struct {
		name        string
		table       []desc
		ind         []desc
		availIdx    uint16
		heads       []uint16
		wantR       int // readable bytes
		wantW       int // writable bytes
		wantErr     error
		wantNothing bool
	}{
		{"nothing available", nil, nil, 0, nil, 0, 0, nil, true},
		{"one readable", []desc{{dataAt, 44, 0, 0}}, nil, 1, []uint16{0}, 44, 0, nil, false},
		{"readable then writable", []desc{{dataAt, 10, next, 1}, {dataAt + 10, 20, next | descWrite, 2}, {dataAt + 30, 5, descWrite, 0}}, nil, 1, []uint16{0}, 10, 25, nil, false},
		{"indirect", []desc{{indirAt, 32, indirect, 0}}, []desc{{dataAt, 4, next, 1}, {dataAt + 4, 6, descWrite, 0}}, 1, []uint16{0}, 4, 6, nil, false},
		{"loop of two", []desc{{dataAt, 1, next, 1}, {dataAt, 1, next, 0}}, nil, 1, []uint16{0}, 0, 0, vhostuser.ErrProtocol, false},
		{"self loop", []desc{{dataAt, 1, next, 0}}, nil, 1, []uint16{0}, 0, 0, vhostuser.ErrProtocol, false},
		{"next beyond size", []desc{{dataAt, 1, next, 9}}, nil, 1, []uint16{0}, 0, 0, vhostuser.ErrProtocol, false},
		{"head beyond size", nil, nil, 1, []uint16{8}, 0, 0, vhostuser.ErrProtocol, false},
		{"buffer past the region", []desc{{memBase + memLen - 4, 8, 0, 0}}, nil, 1, []uint16{0}, 0, 0, vhostuser.ErrOutOfBounds, false},
		{"buffer below the region", []desc{{memBase - 1, 2, 0, 0}}, nil, 1, []uint16{0}, 0, 0, vhostuser.ErrOutOfBounds, false},
		{"address wraps", []desc{{^uint64(0) - 2, 8, 0, 0}}, nil, 1, []uint16{0}, 0, 0, vhostuser.ErrOutOfBounds, false},
		{"readable after writable", []desc{{dataAt, 1, next | descWrite, 1}, {dataAt, 1, 0, 0}}, nil, 1, []uint16{0}, 0, 0, vhostuser.ErrProtocol, false},
		{"indirect inside indirect", []desc{{indirAt, 16, indirect, 0}}, []desc{{indirAt, 16, indirect, 0}}, 1, []uint16{0}, 0, 0, vhostuser.ErrProtocol, false},
		{"indirect with next", []desc{{indirAt, 16, indirect | next, 1}, {dataAt, 1, 0, 0}}, nil, 1, []uint16{0}, 0, 0, vhostuser.ErrProtocol, false},
		{"indirect table of 7 bytes", []desc{{indirAt, 7, indirect, 0}}, nil, 1, []uint16{0}, 0, 0, vhostuser.ErrProtocol, false},
		{"indirect table outside", []desc{{memBase + memLen - 16, 32, indirect, 0}}, nil, 1, []uint16{0}, 0, 0, vhostuser.ErrOutOfBounds, false},
		{"indirect loop", []desc{{indirAt, 32, indirect, 0}}, []desc{{dataAt, 1, next, 1}, {dataAt, 1, next, 0}}, 1, []uint16{0}, 0, 0, vhostuser.ErrProtocol, false},
		{"available index too far ahead", []desc{{dataAt, 1, 0, 0}}, nil, 9, []uint16{0}, 0, 0, vhostuser.ErrProtocol, false},
		{"chain of 4 GiB", []desc{{dataAt, 0xffffffff, 0, 0}}, nil, 1, []uint16{0}, 0, 0, vhostuser.ErrOutOfBounds, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, _ := ring(t, tt.table, tt.ind, tt.availIdx, tt.heads...)
			c, ok, err := q.Pop()
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Pop = %+v, %v, %v; want %v", c, ok, err, tt.wantErr)
				}
				return
			}
			if err != nil || ok == tt.wantNothing {
				t.Fatalf("Pop = %+v, %v, %v", c, ok, err)
			}
			if c.ReadableLen() != tt.wantR || c.WritableLen() != tt.wantW {
				t.Fatalf("chain of %d readable, %d writable bytes; want %d, %d", c.ReadableLen(), c.WritableLen(), tt.wantR, tt.wantW)
			}
		})
	}
}

func TestPushAndReadWrite(t *testing.T) {
	next := uint16(1)
	q, mem := ring(t, []desc{{dataAt, 3, next, 1}, {dataAt + 100, 4, next | descWrite, 2}, {dataAt + 200, 4, descWrite, 0}}, nil, 1, 0)
	copy(mem[dataAt-memBase:], "abc")
	c, ok, err := q.Pop()
	if err != nil || !ok {
		t.Fatalf("Pop: %v %v", ok, err)
	}
	got := make([]byte, 10)
	if n, err := q.Read(&c, 1, got); err != nil || string(got[:n]) != "bc" {
		t.Fatalf("Read from 1 = %q, %v", got[:n], err)
	}
	if n, err := q.Write(&c, 2, []byte("0123456789")); err != nil || n != 6 {
		t.Fatalf("Write = %d, %v; want 6 bytes (the rest does not fit)", n, err)
	}
	if w := string(mem[dataAt-memBase+102 : dataAt-memBase+104]); w != "01" {
		t.Errorf("first writable buffer holds %q", w)
	}
	if w := string(mem[dataAt-memBase+200 : dataAt-memBase+204]); w != "2345" {
		t.Errorf("second writable buffer holds %q", w)
	}
	if err := q.Push(&c, 6); err != nil {
		t.Fatal(err)
	}
	used := mem[usedAt-memBase:]
	if idx, id, n := binary.LittleEndian.Uint16(used[2:]), binary.LittleEndian.Uint32(used[4:]), binary.LittleEndian.Uint32(used[8:]); idx != 1 || id != 0 || n != 6 {
		t.Fatalf("used ring idx %d elem {%d %d}, want 1 {0 6}", idx, id, n)
	}
}

// FuzzPop fills the descriptor table, the indirect table and the available
// ring with arbitrary bytes: Pop may refuse but never panics, and every
// buffer it returns lies inside the region.
func FuzzPop(f *testing.F) {
	f.Add(make([]byte, 256), uint16(1))
	seed := make([]byte, 256)
	binary.LittleEndian.PutUint64(seed, indirAt)
	binary.LittleEndian.PutUint32(seed[8:], 32)
	binary.LittleEndian.PutUint16(seed[12:], 4)
	f.Add(seed, uint16(1))
	f.Fuzz(func(t *testing.T, table []byte, availIdx uint16) {
		q, mem := ring(t, nil, nil, availIdx)
		copy(mem[descAt-memBase:descAt-memBase+16*qSize], table)
		if len(table) > 16*qSize {
			copy(mem[indirAt-memBase:], table[16*qSize:])
		}
		if len(table) > 0 {
			for i := range qSize {
				binary.LittleEndian.PutUint16(mem[availAt-memBase+4+2*i:], uint16(table[i%len(table)]))
			}
		}
		for range 2 * qSize {
			c, ok, err := q.Pop()
			if err != nil || !ok {
				return
			}
			for _, s := range append(c.Readable, c.Writable...) {
				if s.Addr < memBase || s.Addr+uint64(s.Len) > memBase+memLen {
					t.Fatalf("segment %+v outside the region", s)
				}
			}
			b := make([]byte, c.ReadableLen())
			if _, err := q.Read(&c, 0, b); err != nil {
				t.Fatalf("Read of a checked chain: %v", err)
			}
			if err := q.Push(&c, 0); err != nil {
				t.Fatal(err)
			}
		}
	})
}
