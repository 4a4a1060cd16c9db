// Package imagetest makes files the image store (core/images) takes, for
// tests that need an image but not a bootable one: small ones, and sparse
// ones of a large apparent size.
package imagetest

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"maps"
	"os"
	"slices"
	"testing"
)

// QCOW2 returns a qcow2 file: a version 3 header (64 KiB clusters, a
// virtual size of 1 GiB) followed by payload. The store takes it by its
// header; nothing reads the rest.
func QCOW2(payload []byte) []byte {
	b := make([]byte, 512, 512+len(payload))
	copy(b, "QFI\xfb")
	binary.BigEndian.PutUint32(b[4:], 3)      // version
	binary.BigEndian.PutUint32(b[20:], 16)    // cluster_bits
	binary.BigEndian.PutUint64(b[24:], 1<<30) // size
	binary.BigEndian.PutUint32(b[100:], 104)  // header_length (version 3)
	return append(b, payload...)
}

// Ext returns a raw image of size bytes (a multiple of 1024, at least
// 2048) holding an ext superblock (magic 0xEF53, 1 KiB blocks, as many as
// fit) and zeros: the store takes it as a raw ext image by its superblock
// (debugfs finds no /boot in it). Change bytes after 2048 for another
// fingerprint.
func Ext(size int) []byte {
	if size < 2048 || size%1024 != 0 {
		panic("imagetest.Ext: the size must be a multiple of 1024, at least 2048")
	}
	b := make([]byte, size)
	sb := b[1024:]
	binary.LittleEndian.PutUint32(sb[0x4:], uint32(size/1024)) // s_blocks_count_lo
	binary.LittleEndian.PutUint32(sb[0x18:], 0)                // s_log_block_size: 1 KiB
	binary.LittleEndian.PutUint16(sb[0x38:], 0xEF53)           // s_magic
	return b
}

// Sparse writes a file of apparent size size at path holding each region's
// bytes at its offset (regions must not overlap) and holes elsewhere.
func Sparse(t testing.TB, path string, size int64, regions map[int64][]byte) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for off, b := range regions {
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// Sum returns the sha256 (hex) of the file Sparse writes for size and
// regions, computed from them: reading the holes back is slow on a loaded
// machine.
func Sum(size int64, regions map[int64][]byte) string {
	h, pos := sha256.New(), int64(0)
	zeros := make([]byte, 1<<20)
	offs := slices.Sorted(maps.Keys(regions))
	for _, off := range append(offs, size) {
		for pos < off {
			n := min(off-pos, int64(len(zeros)))
			h.Write(zeros[:n])
			pos += n
		}
		if off < size {
			h.Write(regions[off])
			pos += int64(len(regions[off]))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Random returns n random bytes.
func Random(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}
