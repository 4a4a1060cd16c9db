package guestimage

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/pierrec/lz4/v4"
)

// extractVmlinux writes the ELF kernel inside the bzImage at vmlinuz to out.
// It reads the compressed payload's place from the x86 boot header
// (payload_offset, payload_length) and decompresses the LZ4 payload of
// Debian's kernels (the legacy LZ4 frame) with github.com/pierrec/lz4/v4.
func extractVmlinux(ctx context.Context, vmlinuz, out string) error {
	d, err := os.ReadFile(vmlinuz)
	if err != nil {
		return err
	}
	if len(d) < 0x250 || string(d[0x202:0x206]) != "HdrS" {
		return errors.New("not an x86 bzImage")
	}
	setupSects := int(d[0x1f1])
	if setupSects == 0 {
		setupSects = 4
	}
	start := (setupSects+1)*512 + int(binary.LittleEndian.Uint32(d[0x248:]))
	n := int(binary.LittleEndian.Uint32(d[0x24c:]))
	if n < 8 || start+n > len(d) {
		return errors.New("bad payload offset or length in the boot header")
	}
	payload := d[start : start+n]
	if !bytes.HasPrefix(payload, []byte{0x02, 0x21, 0x4c, 0x18}) {
		return fmt.Errorf("payload is not LZ4 (magic % x)", payload[:4])
	}
	size := binary.LittleEndian.Uint32(payload[n-4:]) // the kernel appends the decompressed size
	elf, err := decompressLZ4(ctx, payload[:n-4], size)
	if err != nil {
		return fmt.Errorf("decompressing the kernel: %w", err)
	}
	if uint32(len(elf)) != size || !bytes.HasPrefix(elf, []byte("\x7fELF")) {
		return fmt.Errorf("decompressed kernel is %d bytes, want an ELF of %d", len(elf), size)
	}
	return writeFileAtomic(out, elf, 0o644)
}

// decompressLZ4 decompresses an LZ4 frame (the legacy frame the kernel's
// build writes, or a current one), reading at most limit+1 bytes of output
// so a corrupt header cannot make it allocate without bound.
func decompressLZ4(ctx context.Context, frame []byte, limit uint32) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	out.Grow(int(limit))
	r := lz4.NewReader(bytes.NewReader(frame))
	if _, err := io.Copy(&out, io.LimitReader(r, int64(limit)+1)); err != nil {
		return nil, fmt.Errorf("lz4: %w", err)
	}
	return out.Bytes(), nil
}
