package images

import (
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// ImportProgress is one import in progress, as Store.Imports lists it.
type ImportProgress struct {
	// Path is the file being imported, as the import was asked for it.
	Path string
	// Alias is the alias the image gets ("" when none).
	Alias string
	// Done is the bytes of data copied so far (holes are skipped, not
	// counted); Total is the data to copy (disk, kernel and initrd).
	Done, Total int64
	// Started is when the copy began.
	Started time.Time
}

// Name is what a person calls the import: its alias, else the file's base
// name.
func (p ImportProgress) Name() string {
	if p.Alias != "" {
		return p.Alias
	}
	return filepath.Base(p.Path)
}

// running is the set of imports in progress, kept in memory only: a
// restart forgets them (their copies stop with the daemon).
type running struct {
	mu   sync.Mutex
	list map[*claim]*ImportProgress
}

// track records c as the import of path (alias) from now until untrack.
func (s *Store) track(c *claim, path, alias string, total int64) {
	s.running.mu.Lock()
	defer s.running.mu.Unlock()
	if s.running.list == nil {
		s.running.list = map[*claim]*ImportProgress{}
	}
	c.shown = &ImportProgress{Path: path, Alias: alias, Total: total, Started: s.now()}
	s.running.list[c] = c.shown
}

// untrack forgets c's import.
func (s *Store) untrack(c *claim) {
	s.running.mu.Lock()
	defer s.running.mu.Unlock()
	delete(s.running.list, c)
}

// advance adds n copied bytes to c's import, if tracked.
func (c *claim) advance(n int64) {
	if c.shown == nil {
		return
	}
	c.s.running.mu.Lock()
	c.shown.Done += n
	c.s.running.mu.Unlock()
}

// Imports returns the imports in progress, oldest first: a copy, safe to
// keep.
func (s *Store) Imports() []ImportProgress {
	s.running.mu.Lock()
	out := make([]ImportProgress, 0, len(s.running.list))
	for _, p := range s.running.list {
		out = append(out, *p)
	}
	s.running.mu.Unlock()
	slices.SortFunc(out, func(a, b ImportProgress) int {
		if c := a.Started.Compare(b.Started); c != 0 {
			return c
		}
		return strings.Compare(a.Path, b.Path)
	})
	return out
}
