// Package oomwatch follows the console log of every running guest and
// reports the kernel's OOM kills it shows to the instance service, which
// turns them into the instance's OutOfMemory condition.
package oomwatch

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/guestlink/guestlink/core/console"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/oomkill"
)

// Reporter is the instance service's side: ReportOOMKill is called once
// per kill line, from the watch's goroutine.
type Reporter interface {
	ReportOOMKill(ctx context.Context, uuid string, k instance.OOMKill) error
}

// DefaultPoll is how often a watch looks for new console bytes.
const DefaultPoll = time.Second

// readChunk is a watch's read buffer: small, as every running guest has
// one (10,000 sim guests: 40 MiB), and a kill line is about 200 bytes.
const readChunk = 4 << 10

// Config configures a Watcher.
type Config struct {
	Reporter Reporter
	Logger   *slog.Logger
	Poll     time.Duration // DefaultPoll if 0
}

// Watcher holds one watch per running guest with a console log. Its
// methods are the instance hooks' GuestRunning, GuestStopped and
// InstanceDeleted, and are safe for concurrent use.
type Watcher struct {
	cfg     Config
	mu      sync.Mutex
	watches map[string]*watch // by instance uuid
	closed  bool
	wg      sync.WaitGroup
}

type watch struct {
	path   string
	cancel context.CancelFunc
}

// New returns a Watcher.
func New(cfg Config) *Watcher {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultPoll
	}
	return &Watcher{cfg: cfg, watches: map[string]*watch{}}
}

// GuestRunning starts watching inst's console log (Details "console_log")
// from its current end, so a daemon restart does not report the kills of
// the boot's start again (the agent's counter carries them), nor a backend
// that appends every boot to one log the kills of earlier boots. A guest
// watched already, at the same path, is left alone; one without a console
// log (an absolute path) is not watched.
func (w *Watcher) GuestRunning(inst *instance.Instance) {
	path := inst.Details[console.DetailKey]
	if path == "" || !filepath.IsAbs(path) {
		return
	}
	var offset int64
	if st, err := os.Stat(path); err == nil {
		offset = st.Size()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	if old := w.watches[inst.UUID]; old != nil {
		if old.path == path {
			return
		}
		old.cancel()
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.watches[inst.UUID] = &watch{path: path, cancel: cancel}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.follow(ctx, inst.UUID, inst.Name, path, offset)
	}()
}

// follow reads the log's new bytes until ctx ends, cut into lines, and
// reports the kill lines: at most one report a poll period, which carries
// the kills since the last (a guest that floods its console with kill
// lines costs the daemon one event a second, not one a line).
func (w *Watcher) follow(ctx context.Context, uuid, name, path string, offset int64) {
	var (
		lines   oomkill.Lines
		next    = offset
		pending instance.OOMKill
		last    time.Time
	)
	flush := func() {
		if pending.Count == 0 {
			return
		}
		if err := w.cfg.Reporter.ReportOOMKill(ctx, uuid, pending); err != nil && ctx.Err() == nil {
			w.cfg.Logger.Warn("oomwatch: reporting an OOM kill", "instance", name, "err", err)
		}
		pending, last = instance.OOMKill{}, time.Now()
	}
	opts := console.FollowOptions{Poll: w.cfg.Poll, Chunk: readChunk, Idle: func() error { flush(); return nil }}
	err := console.Follow(ctx, path, offset, opts, func(c console.Chunk) error {
		if c.Offset != next {
			lines.Reset() // read again from the start: a new log
		}
		next = c.End()
		lines.Write(c.Data, func(line []byte) {
			if k, ok := oomkill.Parse(line); ok {
				n := pending.Count + 1
				pending = instance.OOMKill{Process: k.Process, PID: k.PID, Source: instance.OOMSourceConsole, Count: n}
			}
		})
		if time.Since(last) >= w.cfg.Poll {
			flush()
		}
		return nil
	})
	flush()
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		w.cfg.Logger.Warn("oomwatch: following the console log", "instance", name, "err", err)
	}
}

// GuestStopped stops watching inst's console log.
func (w *Watcher) GuestStopped(inst *instance.Instance) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if old := w.watches[inst.UUID]; old != nil {
		old.cancel()
		delete(w.watches, inst.UUID)
	}
}

// InstanceDeleted is GuestStopped.
func (w *Watcher) InstanceDeleted(inst *instance.Instance) { w.GuestStopped(inst) }

// Close stops every watch and waits for their goroutines.
func (w *Watcher) Close() {
	w.mu.Lock()
	w.closed = true
	for uuid, wt := range w.watches {
		wt.cancel()
		delete(w.watches, uuid)
	}
	w.mu.Unlock()
	w.wg.Wait()
}
