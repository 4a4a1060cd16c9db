package images

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
)

// headSize is how much of a file detectFormat reads (the ext superblock
// ends at byte 2048).
const headSize = 4096

// The formats the store takes.
const (
	FormatRaw   = "raw"   // a raw ext2/3/4 filesystem image (superblock magic 0xEF53 at byte 1080)
	FormatQCOW2 = "qcow2" // a qcow2 file (magic "QFI\xfb", version 2 or 3)
)

// detectFormat checks head, the first headSize bytes of a file of size
// bytes (apparent size), and returns FormatRaw or FormatQCOW2; for anything
// else an error saying what was found (wrapped with errdefs.ErrInvalid by
// the caller).
func detectFormat(head []byte, size int64) (string, error) {
	switch {
	case bytes.HasPrefix(head, []byte("QFI\xfb")):
		return FormatQCOW2, checkQCOW2(head)
	case isExt(head):
		return FormatRaw, checkExt(head, size)
	}
	return "", fmt.Errorf("found %s; the store takes a raw ext4 filesystem image (magic 0xEF53 at byte 1080) or a qcow2 file (magic QFI\\xfb)", describe(head, size))
}

// checkQCOW2 checks the fields of a qcow2 header the store relies on.
func checkQCOW2(head []byte) error {
	if len(head) < 32 {
		return fmt.Errorf("found a qcow2 magic in a file of %d bytes, too short for a qcow2 header", len(head))
	}
	if v := binary.BigEndian.Uint32(head[4:]); v != 2 && v != 3 {
		return fmt.Errorf("found a qcow2 header of version %d; versions 2 and 3 are taken", v)
	}
	if cb := binary.BigEndian.Uint32(head[20:]); cb < 9 || cb > 21 {
		return fmt.Errorf("found a qcow2 header with cluster_bits %d (9 to 21 are valid)", cb)
	}
	return nil
}

// checkExt checks the ext superblock in head against the file's size: a
// block size ext knows, and a filesystem that fits in the file (a
// truncated copy is refused).
func checkExt(head []byte, size int64) error {
	if len(head) < 2048 {
		return fmt.Errorf("found an ext magic in a file of %d bytes, too small for an ext filesystem", size)
	}
	sb := head[1024:2048]
	logBS := binary.LittleEndian.Uint32(sb[0x18:])
	if logBS > 6 { // 1 KiB << 6 = 64 KiB, the largest ext block size
		return fmt.Errorf("found an ext superblock with block size 2^%d KiB, which no ext filesystem has", logBS)
	}
	blocks := uint64(binary.LittleEndian.Uint32(sb[0x4:]))
	const incompat64bit = 0x80
	if binary.LittleEndian.Uint32(sb[0x60:])&incompat64bit != 0 {
		blocks |= uint64(binary.LittleEndian.Uint32(sb[0x150:])) << 32
	}
	if blocks == 0 {
		return fmt.Errorf("found an ext superblock with no blocks")
	}
	bs := uint64(1024) << logBS
	if blocks > uint64(size)/bs {
		return fmt.Errorf("found an ext filesystem of %s in a file of %s: the file is truncated", sizeString(int64(min(blocks, 1<<40)*bs)), sizeString(size))
	}
	return nil
}

// signatures are what describe recognises besides the accepted formats.
var signatures = []struct {
	off  int
	sig  string
	name string
}{
	{0, "\x1f\x8b", "gzip-compressed data (decompress it first)"},
	{0, "\xfd7zXZ\x00", "xz-compressed data (decompress it first)"},
	{0, "\x28\xb5\x2f\xfd", "zstd-compressed data (decompress it first)"},
	{0, "BZh", "bzip2-compressed data (decompress it first)"},
	{0, "KDMV", "a VMDK disk (convert it: qemu-img convert -O qcow2)"},
	{0, "vhdxfile", "a VHDX disk (convert it: qemu-img convert -O qcow2)"},
	{0, "conectix", "a VHD disk (convert it: qemu-img convert -O qcow2)"},
	{0x40, "\x7f\x10\xda\xbe", "a VirtualBox VDI disk (convert it: qemu-img convert -O qcow2)"},
	{0, "hsqs", "a squashfs filesystem"},
	{0, "\x7fELF", "an ELF executable"},
	{0x202, "HdrS", "a Linux kernel (give it with --kernel)"},
	{0, "MZ", "a PE/EFI executable"},
	{0, "070701", "a cpio archive (an initrd? give it with --initrd)"},
	{257, "ustar", "a tar archive"},
	{0, "LUKS\xba\xbe", "a LUKS-encrypted volume"},
	{512, "EFI PART", "a partitioned disk (GPT); the store takes a filesystem image, not a whole disk"},
}

// describe names what head looks like, for the refusal of a file that is
// no image.
func describe(head []byte, size int64) string {
	if size == 0 {
		return "an empty file"
	}
	for _, s := range signatures {
		if len(head) >= s.off+len(s.sig) && string(head[s.off:s.off+len(s.sig)]) == s.sig {
			return s.name
		}
	}
	if len(head) >= 512 && head[510] == 0x55 && head[511] == 0xAA {
		return "a partitioned disk or boot sector (MBR); the store takes a filesystem image, not a whole disk"
	}
	if len(bytes.Trim(head, "\x00")) == 0 {
		return fmt.Sprintf("only zero bytes in the first %d bytes", len(head))
	}
	n := min(len(head), 8)
	hex := make([]string, n)
	for i, b := range head[:n] {
		hex[i] = fmt.Sprintf("%02x", b)
	}
	what := "unrecognised data"
	if size < 1082 {
		what = fmt.Sprintf("a file of %d bytes, too small for an ext superblock, with unrecognised data", size)
	}
	return fmt.Sprintf("%s (first bytes %s)", what, strings.Join(hex, " "))
}

// sizeString writes n bytes for a message: "12.0 GiB", "512.0 MiB",
// "300 bytes".
func sizeString(n int64) string {
	switch {
	case n >= 1<<40:
		return fmt.Sprintf("%.1f TiB", float64(n)/(1<<40))
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
