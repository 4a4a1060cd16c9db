package images

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/guestlink/guestlink/errdefs"
)

// openRegular opens the file at path for reading if it is a regular file:
// anything else (a FIFO, a device, a directory, a socket) is refused with
// errdefs.ErrInvalid naming its type, before it is opened. The open is
// non-blocking too, so a file swapped for a FIFO after the check never
// blocks; the opened file is checked again.
func openRegular(path string) (*os.File, fs.FileInfo, error) {
	if !filepath.IsAbs(path) {
		return nil, nil, fmt.Errorf("the path must be absolute: %w", errdefs.ErrInvalid)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, nil, fileErr(err)
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, notRegular(fi.Mode())
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, fileErr(err)
	}
	fi2, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	if !fi2.Mode().IsRegular() {
		_ = f.Close()
		return nil, nil, notRegular(fi2.Mode())
	}
	return f, fi2, nil
}

// notRegular is the refusal of a file of mode m.
func notRegular(m fs.FileMode) error {
	return fmt.Errorf("%s is not a regular file; only a regular file can be imported: %w", fileType(m), errdefs.ErrInvalid)
}

// fileType names the type of a file of mode m.
func fileType(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m&fs.ModeIrregular != 0:
		return "an irregular file"
	}
	return "a file of mode " + m.String()
}
