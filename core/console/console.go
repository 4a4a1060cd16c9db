// Package console reads a guest's console log (the file a backend writes
// the guest's serial console or stdout to, GuestState.Details
// "console_log") without ever holding it whole: a byte range of it as a
// stream, or its new bytes as they are written (Follow), through one fixed
// buffer, so that a guest printing megabytes a second costs the daemon no
// memory, only reads.
package console

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"
)

// DetailKey is the GuestState.Details key under which backends give the
// absolute path of a guest's console log.
const DetailKey = "console_log"

// Range is a part of a console log.
type Range struct {
	// Start is the offset of the first byte; End the offset after the last.
	Start, End int64
	// Size is the log's size when the range was taken.
	Size int64
}

// Len returns how many bytes r spans.
func (r Range) Len() int64 { return r.End - r.Start }

// Span resolves a request for part of a log of size bytes: the bytes from
// offset on (offset beyond the end is an empty range at the end), or with
// tail > 0 the last tail bytes; limit > 0 caps the length.
func Span(size, offset, tail, limit int64) Range {
	start := min(max(offset, 0), size)
	if tail > 0 {
		start = max(size-tail, 0)
	}
	end := size
	if limit > 0 && end-start > limit {
		end = start + limit
	}
	return Range{Start: start, End: end, Size: size}
}

// Open opens the log at path for reading r, the range that Span gives for
// offset, tail and limit at the log's current size. A log that does not
// exist yet (the guest never started) reads as empty. The caller closes the
// reader; it never reads beyond r.End, however much the guest writes
// meanwhile.
func Open(path string, offset, tail, limit int64) (io.ReadCloser, Range, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return io.NopCloser(eof{}), Range{}, nil
	}
	if err != nil {
		return nil, Range{}, fmt.Errorf("opening console log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, Range{}, fmt.Errorf("reading console log size: %w", err)
	}
	r := Span(st.Size(), offset, tail, limit)
	return &section{SectionReader: io.NewSectionReader(f, r.Start, r.Len()), f: f}, r, nil
}

type eof struct{}

func (eof) Read([]byte) (int, error) { return 0, io.EOF }

// section is a part of an open file that closes the file.
type section struct {
	*io.SectionReader
	f *os.File
}

func (s *section) Close() error { return s.f.Close() }

// Defaults of FollowOptions.
const (
	DefaultPoll  = 100 * time.Millisecond
	DefaultChunk = 32 << 10
)

// FollowOptions tune Follow.
type FollowOptions struct {
	// Poll is how often Follow looks for new bytes once it has read
	// everything (DefaultPoll).
	Poll time.Duration
	// Chunk is the size of the one read buffer (DefaultChunk).
	Chunk int
	// MaxLag > 0 bounds how far behind the end of the log a reader may
	// fall: when more than MaxLag bytes are unread, Follow skips to the
	// last MaxLag and tells fn how many it skipped. A page that shows the
	// console uses it to stay current with a guest printing faster than a
	// browser can draw; the API's follow stream does not (0: every byte).
	MaxLag int64
	// Idle, if set, is called after each poll that found nothing new; an
	// error ends Follow with it. A stream uses it for heartbeats, which is
	// how it notices a client that went away while the guest was silent.
	Idle func() error
}

// Chunk is one piece of a followed log.
type Chunk struct {
	// Data is only valid during the call that receives it.
	Data []byte
	// Offset is the offset of Data's first byte in the log.
	Offset int64
	// Skipped > 0 says that many bytes before Data were left out
	// (FollowOptions.MaxLag).
	Skipped int64
}

// End returns the offset after the chunk: where a reader resumes.
func (c Chunk) End() int64 { return c.Offset + int64(len(c.Data)) }

// Follow reads the log at path from offset on and calls fn with every new
// piece until ctx ends (nil), fn fails (its error) or the log is removed
// (an error wrapping fs.ErrNotExist: the guest was deleted). A log that
// shrinks or is replaced (QEMU truncates it at each start) is read again
// from its start (the next chunk's Offset is 0). A log that does not exist
// yet is waited for.
func Follow(ctx context.Context, path string, offset int64, opts FollowOptions, fn func(Chunk) error) error {
	if opts.Poll <= 0 {
		opts.Poll = DefaultPoll
	}
	if opts.Chunk <= 0 {
		opts.Chunk = DefaultChunk
	}
	buf := make([]byte, opts.Chunk)
	tick := time.NewTicker(opts.Poll)
	defer tick.Stop()
	var f *os.File
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	existed := false
	for {
		read := false
		pst, err := os.Stat(path)
		switch {
		case errors.Is(err, fs.ErrNotExist) && existed:
			return fmt.Errorf("console log removed: %w", err)
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return fmt.Errorf("following console log: %w", err)
		default:
			existed = true
			if f != nil {
				if fst, err := f.Stat(); err != nil || !os.SameFile(fst, pst) {
					f.Close() // replaced: read the new one from its start
					f, offset = nil, 0
				}
			}
			if f == nil {
				if f, err = os.Open(path); err != nil {
					return fmt.Errorf("opening console log: %w", err)
				}
			}
			size := pst.Size()
			if size < offset {
				offset = 0 // truncated: a new boot
			}
			var skipped int64
			if opts.MaxLag > 0 && size-offset > opts.MaxLag {
				skipped = size - opts.MaxLag - offset
				offset = size - opts.MaxLag
			}
			for offset < size {
				n, err := f.ReadAt(buf[:min(int64(len(buf)), size-offset)], offset)
				if n > 0 {
					read = true
					if err := fn(Chunk{Data: buf[:n], Offset: offset, Skipped: skipped}); err != nil {
						return err
					}
					offset += int64(n)
					skipped = 0
				}
				if err != nil && !errors.Is(err, io.EOF) {
					return fmt.Errorf("reading console log: %w", err)
				}
				if n == 0 {
					break
				}
				if ctx.Err() != nil {
					return nil
				}
			}
		}
		if !read && opts.Idle != nil {
			if err := opts.Idle(); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
