package images

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/guestlink/guestlink/errdefs"
)

// Limits bound what an import may take of the host. The zero value takes
// the defaults.
type Limits struct {
	// MaxSize is the largest image (apparent size: holes count) an import
	// takes; default DefaultMaxSize (guestlinkd --image-max-size).
	MaxSize int64
	// Reserve is the free space an import leaves on the image directory's
	// filesystem; default min(1 GiB, 5% of the filesystem).
	Reserve int64
}

// DefaultMaxSize is the default of Limits.MaxSize: 64 GiB.
const DefaultMaxSize int64 = 64 << 30

// defaultCheckEvery is how many bytes a copy processes between two checks
// of the free space.
const defaultCheckEvery = 64 << 20

// space returns the bytes available to the daemon in the filesystem of dir
// (f_bavail) and the filesystem's size.
func space(dir string) (avail, total int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, fmt.Errorf("checking the free space of the image store: %w", err)
	}
	return int64(st.Bavail) * st.Bsize, int64(st.Blocks) * st.Bsize, nil
}

// reserve returns the free space to keep on a filesystem of total bytes.
func (l Limits) reserve(total int64) int64 {
	if l.Reserve > 0 {
		return l.Reserve
	}
	return min(1<<30, total/20)
}

// claims tracks the space the imports in progress still need, so that two
// imports do not count the same free space.
type claims struct {
	mu    sync.Mutex
	total int64
}

// claim is one import's share of the image directory's free space: the
// data it still has to write.
type claim struct {
	s         *Store
	remaining int64
	sinceLast int64           // bytes processed since the last check
	every     int64           // bytes between two checks
	shown     *ImportProgress // the import's entry in Store.Imports (nil: untracked)
	// afterCheck, set by tests, runs after each check during the copy.
	afterCheck func()
}

// claim checks that need bytes fit in the image directory next to the
// other imports in progress, keeping the reserve, and records them;
// errdefs.ErrNoSpace if they do not. Release the claim when the import
// ends.
func (s *Store) claim(need int64) (*claim, error) {
	c := &claim{s: s, every: s.checkEvery, afterCheck: s.afterCheck}
	s.claims.mu.Lock()
	defer s.claims.mu.Unlock()
	if err := s.fits(need, s.claims.total); err != nil {
		return nil, err
	}
	c.remaining = need
	s.claims.total += need
	return c, nil
}

// fits checks that need bytes fit beside others bytes claimed by other
// imports.
func (s *Store) fits(need, others int64) error {
	avail, total, err := space(s.dir)
	if err != nil {
		return err
	}
	res := s.lim.reserve(total)
	if free := avail - res - others; need > free {
		return fmt.Errorf("not enough space in the image store: the image needs %s, %s is available (%s free, keeping %s in reserve%s): %w",
			sizeString(need), sizeString(max(free, 0)), sizeString(avail), sizeString(res), othersNote(others), errdefs.ErrNoSpace)
	}
	return nil
}

func othersNote(others int64) string {
	if others == 0 {
		return ""
	}
	return ", " + sizeString(others) + " claimed by imports in progress"
}

// progress records n more bytes of the source processed (written or kept
// as a hole).
func (c *claim) progress(n int64) {
	c.advance(n)
	n = min(n, c.remaining)
	c.s.claims.mu.Lock()
	c.remaining -= n
	c.s.claims.total -= n
	c.s.claims.mu.Unlock()
	c.sinceLast += n
}

// check runs before a write: every c.every bytes it checks that what
// remains still fits (another writer may have filled the disk).
func (c *claim) check() error {
	if c.sinceLast < c.every {
		return nil
	}
	c.sinceLast = 0
	c.s.claims.mu.Lock()
	others := c.s.claims.total - c.remaining
	c.s.claims.mu.Unlock()
	if err := c.s.fits(c.remaining, others); err != nil {
		return fmt.Errorf("during the copy: %w", err)
	}
	if c.afterCheck != nil {
		c.afterCheck()
	}
	return nil
}

// release gives back what the import did not write.
func (c *claim) release() {
	c.s.claims.mu.Lock()
	c.s.claims.total -= c.remaining
	c.remaining = 0
	c.s.claims.mu.Unlock()
}
