// Package fsfreeze freezes and thaws the guest's filesystems for a
// filesystem-consistent snapshot, as qemu-guest-agent's guest-fsfreeze-*
// commands do: hooks in HookDir are run with "freeze" first, then every
// mounted, writable, device-backed local filesystem is frozen with the
// FIFREEZE ioctl in reverse mount order ("/" last); a thaw undoes it with
// FITHAW in mount order ("/" first), then runs the hooks with "thaw". A
// freeze always ends: the Freezer thaws by itself once its timeout has
// passed, whatever happens to the daemon or the link that asked for it.
//
// Only a guest whose root is the machine's own "/" can be frozen: an agent
// serving a simulated guest (its root a directory of the host) answers
// ErrUnsupported and never touches a filesystem.
package fsfreeze

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/guestlink/guestlink/api"
)

// Timeouts of a freeze.
const (
	// DefaultTimeout is a freeze's timeout when the request names none.
	DefaultTimeout = 60 * time.Second
	// MaxTimeout is the longest timeout a request may ask for.
	MaxTimeout = 10 * time.Minute
	// HookTimeout bounds one hook's run.
	HookTimeout = 30 * time.Second
)

// HookDir is the hook directory inside the guest: each executable in it is
// run as HOOK freeze before the freeze and HOOK thaw after the thaw, in
// name order (qemu-guest-agent's /etc/qemu/fsfreeze-hook.d).
const HookDir = "/etc/guestlink/freeze-hook.d"

// maxHookOutput bounds how much of a hook's output is logged.
const maxHookOutput = 16 << 10

// Errors of Freeze and Thaw, mapped to statuses by the link port.
var (
	// ErrUnsupported: this agent cannot freeze (a simulated guest).
	ErrUnsupported = errors.New("filesystem freeze is not supported by this agent")
	// ErrFrozen: a freeze is already held.
	ErrFrozen = errors.New("the guest's filesystems are already frozen")
	// ErrHook: a freeze hook failed, so nothing was frozen.
	ErrHook = errors.New("a freeze hook failed")
)

// ioctls freezes and thaws one mounted filesystem.
type ioctls interface {
	freeze(dir string) error
	thaw(dir string) error
}

// Freezer freezes one guest's filesystems; its methods are safe for
// concurrent use. The zero value is not usable: make one with New.
type Freezer struct {
	root      string
	hookDir   string // on this machine
	mountinfo string
	log       *slog.Logger
	ops       ioctls

	mu      sync.Mutex
	frozen  []Mount     // held, in mount order; nil when thawed
	timer   *time.Timer // thaws at the timeout
	gen     uint64      // counts freezes, so a stale timer does nothing
	expired bool        // the last freeze ended by its timeout
}

// New returns the freezer of the guest whose root is root ("/" on a VM;
// anything else cannot freeze). log receives what it does (the agent's
// log: the guest's journal).
func New(root string, log *slog.Logger) *Freezer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Freezer{root: root, hookDir: filepath.Join(root, HookDir), mountinfo: "/proc/self/mountinfo", log: log, ops: sysIoctls{}}
}

// Supported returns nil if this agent can freeze its guest, or an error
// wrapping ErrUnsupported that says why.
func (f *Freezer) Supported() error {
	if filepath.Clean(f.root) != "/" {
		return fmt.Errorf("%w: the guest's root is a directory of the host (a simulated guest), and FIFREEZE there would freeze the host's filesystem", ErrUnsupported)
	}
	return nil
}

// Freeze runs the freeze hooks and freezes the planned filesystems, and
// thaws them by itself after timeout (DefaultTimeout if zero). A failing
// hook or ioctl undoes what was done (thaw, thaw hooks) and returns the
// error; a filesystem that does not support freezing (EOPNOTSUPP) or is
// already frozen by someone else (EBUSY) is skipped.
func (f *Freezer) Freeze(ctx context.Context, timeout time.Duration) (*api.FreezeState, error) {
	if err := f.Supported(); err != nil {
		return nil, err
	}
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	if timeout < 0 || timeout > MaxTimeout {
		return nil, fmt.Errorf("freeze timeout %s is outside (0, %s]", timeout, MaxTimeout)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.frozen != nil {
		return nil, ErrFrozen
	}
	data, err := os.ReadFile(f.mountinfo)
	if err != nil {
		return nil, fmt.Errorf("reading the mount table: %w", err)
	}
	mounts, err := ParseMountInfo(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	plan, skipped := Plan(mounts)
	ran, err := f.runHooks(ctx, "freeze", nil)
	if err != nil {
		_, _ = f.runHooks(context.WithoutCancel(ctx), "thaw", ran)
		return nil, err
	}
	st := &api.FreezeState{Frozen: []string{}, Thawed: []string{}, Timeout: int(timeout / time.Second)}
	for _, s := range skipped {
		st.Skipped = append(st.Skipped, api.FreezeSkip{Dir: s.Dir, Reason: s.Reason})
	}
	var held []Mount // in freeze order
	for _, m := range slices.Backward(plan) {
		err := f.ops.freeze(m.Dir)
		switch {
		case err == nil:
			held = append(held, m)
			st.Frozen = append(st.Frozen, m.Dir)
		case errors.Is(err, syscall.EOPNOTSUPP):
			st.Skipped = append(st.Skipped, api.FreezeSkip{Dir: m.Dir, Reason: "the filesystem cannot be frozen (" + m.FSType + ")"})
		case errors.Is(err, syscall.EBUSY):
			st.Skipped = append(st.Skipped, api.FreezeSkip{Dir: m.Dir, Reason: "already frozen by someone else"})
		default:
			slices.Reverse(held)
			f.thawAll(held)
			_, _ = f.runHooks(context.WithoutCancel(ctx), "thaw", nil)
			return nil, fmt.Errorf("freezing %s: %w", m.Dir, err)
		}
	}
	slices.Reverse(held) // mount order, for the thaw
	f.frozen = held
	f.expired = false
	f.gen++
	gen := f.gen
	f.timer = time.AfterFunc(timeout, func() { f.expire(gen) })
	f.log.Info("filesystems frozen", "frozen", st.Frozen, "timeout", timeout)
	return st, nil
}

// Thaw thaws what the freeze holds, in mount order, then runs the thaw
// hooks. Thawing with nothing frozen is not an error: the answer says
// whether the last freeze had ended by its timeout.
func (f *Freezer) Thaw(ctx context.Context) (*api.FreezeState, error) {
	if err := f.Supported(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	st := &api.FreezeState{Frozen: []string{}, Thawed: []string{}, Expired: f.expired}
	if f.frozen == nil {
		f.log.Info("thaw with nothing frozen", "expired", f.expired)
		return st, nil
	}
	st.Thawed, st.Expired = f.thawHeld(ctx, "thawed on request")
	return st, nil
}

// Frozen reports whether a freeze is held.
func (f *Freezer) Frozen() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.frozen != nil
}

// Close thaws what a freeze holds (the agent is stopping).
func (f *Freezer) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.frozen != nil {
		f.thawHeld(context.Background(), "thawed as the agent stops")
	}
}

// expire thaws the freeze gen if it is still held: its timeout passed.
func (f *Freezer) expire(gen uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gen != gen || f.frozen == nil {
		return
	}
	f.log.Warn("freeze timeout passed: thawing by itself", "frozen", dirsOf(f.frozen))
	f.thawHeld(context.Background(), "thawed at the freeze's timeout")
	f.expired = true
}

// thawHeld thaws f.frozen and runs the thaw hooks; f.mu is held.
func (f *Freezer) thawHeld(ctx context.Context, why string) ([]string, bool) {
	if f.timer != nil {
		f.timer.Stop()
		f.timer = nil
	}
	thawed := f.thawAll(f.frozen)
	f.frozen = nil
	f.log.Info("filesystems "+why, "thawed", thawed)
	_, _ = f.runHooks(context.WithoutCancel(ctx), "thaw", nil)
	return thawed, f.expired
}

// thawAll thaws mounts in the order given and returns those thawed; a
// filesystem someone else thawed already (EINVAL) counts as thawed.
func (f *Freezer) thawAll(mounts []Mount) []string {
	out := []string{}
	for _, m := range mounts {
		if err := f.ops.thaw(m.Dir); err != nil && !errors.Is(err, syscall.EINVAL) {
			f.log.Error("thawing a filesystem", "dir", m.Dir, "err", err)
			continue
		}
		out = append(out, m.Dir)
	}
	return out
}

func dirsOf(ms []Mount) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Dir
	}
	return out
}

// hooks lists the executables of the hook directory in name order.
func (f *Freezer) hooks() ([]string, error) {
	entries, err := os.ReadDir(f.hookDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the freeze hooks in %s: %w", HookDir, err)
	}
	var out []string
	for _, e := range entries {
		p := filepath.Join(f.hookDir, e.Name())
		fi, err := os.Stat(p) // a symlink counts as what it points to
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			f.log.Debug("not a freeze hook (not an executable file)", "hook", e.Name())
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

// runHooks runs the hooks with action ("freeze" or "thaw"): only the
// hooks in only if it is not nil. It logs each hook's output and exit and
// returns the hooks that succeeded. For a freeze the first failing hook
// stops the run and its error wraps ErrHook; a failing thaw hook is logged
// and the others still run.
func (f *Freezer) runHooks(ctx context.Context, action string, only []string) ([]string, error) {
	list, err := f.hooks()
	if err != nil {
		if action == "freeze" {
			return nil, fmt.Errorf("%w: %w", ErrHook, err)
		}
		f.log.Error("listing the thaw hooks", "err", err)
		return nil, nil
	}
	var ran []string
	for _, h := range list {
		if only != nil && !slices.Contains(only, h) {
			continue
		}
		if err := f.runHook(ctx, h, action); err != nil {
			if action == "freeze" {
				return ran, fmt.Errorf("%w: %s freeze: %w", ErrHook, filepath.Base(h), err)
			}
			continue
		}
		ran = append(ran, h)
	}
	return ran, nil
}

// runHook runs one hook with a clean environment and logs what it said.
func (f *Freezer) runHook(ctx context.Context, path, action string) error {
	ctx, cancel := context.WithTimeout(ctx, HookTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, action)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"}
	var out limitedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	text := strings.TrimSpace(out.String())
	if err != nil {
		f.log.Error("freeze hook failed", "hook", filepath.Base(path), "action", action, "err", err, "output", text)
		return err
	}
	f.log.Info("freeze hook ran", "hook", filepath.Base(path), "action", action, "output", text)
	return nil
}

// limitedBuffer keeps the first maxHookOutput bytes written to it.
type limitedBuffer struct{ bytes.Buffer }

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := maxHookOutput - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}
