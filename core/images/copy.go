package images

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/guestlink/guestlink/errdefs"
)

// chunkSize is how much a copy reads at once; blockSize the unit of zero
// detection (a block of zeros is not written: it stays a hole).
const (
	chunkSize = 1 << 20
	blockSize = 4096
)

// zeros is a chunk of zero bytes, hashed for a hole and compared with
// what is read.
var zeros = make([]byte, chunkSize)

// extents calls fn for each data extent [start, end) of f (of apparent
// size size), in order, found with SEEK_DATA and SEEK_HOLE. Where the
// filesystem cannot tell (no SEEK_DATA), the whole file is one extent.
func extents(f *os.File, size int64, fn func(start, end int64) error) error {
	for off := int64(0); off < size; {
		start, err := f.Seek(off, unix.SEEK_DATA)
		switch {
		case errors.Is(err, syscall.ENXIO): // only a hole after off
			return nil
		case errors.Is(err, syscall.EINVAL) && off == 0: // no SEEK_DATA here
			return fn(0, size)
		case err != nil:
			return fmt.Errorf("finding the data of the file: %w", err)
		}
		if start >= size {
			return nil
		}
		end, err := f.Seek(start, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("finding the holes of the file: %w", err)
		}
		end = min(end, size)
		if err := fn(start, end); err != nil {
			return err
		}
		off = end
	}
	return nil
}

// dataSize returns the bytes of f's data extents: what a sparse copy
// writes at most.
func dataSize(f *os.File, size int64) (int64, error) {
	var n int64
	err := extents(f, size, func(start, end int64) error { n += end - start; return nil })
	return n, err
}

// sparseCopy copies src (apparent size size) into dst at the same
// offsets, feeding every byte (holes as zeros) to h, so that holes stay
// holes: only the source's data extents are read, and of those only the
// blocks that are not all zeros are written. dst ends truncated to size.
// It stops with ctx's error as soon as ctx ends, and with
// errdefs.ErrNoSpace when the claim's space checks fail.
func sparseCopy(ctx context.Context, src, dst *os.File, size int64, h hash.Hash, c *claim) error {
	buf := make([]byte, chunkSize)
	pos := int64(0) // everything before pos is hashed
	hashZeros := func(end int64) error {
		for pos < end {
			if err := ctx.Err(); err != nil {
				return err
			}
			n := min(end-pos, chunkSize)
			h.Write(zeros[:n])
			pos += n
		}
		return nil
	}
	err := extents(src, size, func(start, end int64) error {
		if err := hashZeros(start); err != nil {
			return err
		}
		for pos < end {
			if err := ctx.Err(); err != nil {
				return err
			}
			b := buf[:min(end-pos, chunkSize)]
			n, err := src.ReadAt(b, pos)
			if n < len(b) {
				if err == nil || errors.Is(err, io.EOF) {
					return fmt.Errorf("the file shrank while it was read (%d bytes at offset %d): %w", n, pos, errdefs.ErrConflict)
				}
				return fmt.Errorf("reading the file: %w", err)
			}
			h.Write(b)
			if err := writeNonZero(dst, b, pos, c); err != nil {
				return err
			}
			c.progress(int64(len(b)))
			pos += int64(len(b))
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := hashZeros(size); err != nil {
		return err
	}
	if err := dst.Truncate(size); err != nil {
		return fmt.Errorf("setting the copy's size: %w", noSpace(err))
	}
	return nil
}

// writeNonZero writes the runs of b (read at offset off) that are not
// whole blocks of zeros to dst at the same offset.
func writeNonZero(dst *os.File, b []byte, off int64, c *claim) error {
	run := -1 // start of the current run of data blocks, or -1
	flush := func(end int) error {
		if run < 0 {
			return nil
		}
		if err := c.check(); err != nil {
			return err
		}
		_, err := dst.WriteAt(b[run:end], off+int64(run))
		run = -1
		if err != nil {
			return fmt.Errorf("writing the copy: %w", noSpace(err))
		}
		return nil
	}
	for i := 0; i < len(b); i += blockSize {
		j := min(i+blockSize, len(b))
		if bytes.Equal(b[i:j], zeros[:j-i]) {
			if err := flush(i); err != nil {
				return err
			}
			continue
		}
		if run < 0 {
			run = i
		}
	}
	return flush(len(b))
}

// noSpace adds errdefs.ErrNoSpace to a write error that is ENOSPC or
// EDQUOT (the disk or the quota filled during the copy).
func noSpace(err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("%w: %w", err, errdefs.ErrNoSpace)
	}
	return err
}
