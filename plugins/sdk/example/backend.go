// Package example is a minimal but complete guestlink backend, meant to be
// copied: its guests are local processes (a shell command, "sleep 3600" by
// default) started in sessions of their own, so they outlive the plugin
// like real VMs. The handle is a small JSON document with everything needed
// to find a guest again, events go through the SDK's eventer, and
// cmd/example is the whole main. example_test.go runs the built plugin
// through the conformance kit.
//
// Its guests run the real guestlink-agent when their command starts it
// ("$GUESTLINK_AGENT" run): guest.go gives the agent what it needs (a root
// with the config drive, a ring port the plugin reads, the hybrid link
// socket the agent listens on), so a guest reaches Ready. A VM backend
// does the same through its VMM.
package example

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/sdk/eventer"
)

// configPrefix is the config key prefix this backend owns.
const configPrefix = "example."

// schema declares the config keys under configPrefix (Info.ConfigSchema):
// the daemon refuses any other example.* key before calling Create.
var schema = []sdk.ConfigKey{
	{Name: "example.command", Type: sdk.ConfigString, Default: "`sleep 3600`", Doc: "the guest's shell command, run with `/bin/sh -c`"},
}

// knownKeys are the names of the keys in schema.
var knownKeys = map[string]bool{}

func init() {
	for _, k := range schema {
		knownKeys[k.Name] = true
	}
}

// handle is what the daemon stores for a guest.
type handle struct {
	UUID    string `json:"uuid"`
	Name    string `json:"name"`
	Command string `json:"command"`
	PID     int    `json:"pid,omitempty"`
	Start   uint64 `json:"start,omitempty"` // process start time, guards against pid reuse
}

// Name is the backend name Info reports.
const Name = "example"

// Backend runs guests as local processes.
type Backend struct {
	version string
	events  *eventer.Eventer
	agent   string // the guestlink-agent binary (sdk.AgentPath)

	mu       sync.Mutex
	children map[int]chan struct{} // our own children: closed when reaped
	watched  map[int]bool          // adopted guests polled for their exit
	rings    map[string]*ring      // ring readers by guest uuid
}

var _ sdk.Backend = (*Backend)(nil)

// New returns a Backend that reports version in Info ("0.1.0" if empty).
func New(version string) *Backend {
	if version == "" {
		version = "0.1.0"
	}
	exe, _ := os.Executable()
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	return &Backend{
		agent:    sdk.AgentPath(exe),
		rings:    map[string]*ring{},
		version:  version,
		events:   eventer.New(sdk.Logger()),
		children: map[int]chan struct{}{},
		watched:  map[int]bool{},
	}
}

func decode(h sdk.Handle) (*handle, error) {
	if len(h) == 0 {
		return nil, fmt.Errorf("empty handle: %w", sdk.ErrInvalid)
	}
	var hd handle
	if err := json.Unmarshal(h, &hd); err != nil {
		return nil, fmt.Errorf("decoding handle: %v: %w", err, sdk.ErrInvalid)
	}
	if hd.UUID == "" {
		return nil, fmt.Errorf("handle without uuid: %w", sdk.ErrInvalid)
	}
	return &hd, nil
}

func (hd *handle) encode() sdk.Handle {
	data, _ := json.Marshal(hd)
	return data
}

// procStart returns the start time of process pid (field 22 of
// /proc/pid/stat), or 0 if it does not exist.
func procStart(pid int) uint64 {
	f := statFields(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if len(f) < 20 || f[0] == "Z" {
		return 0 // zombies are dead
	}
	n, _ := strconv.ParseUint(f[19], 10, 64)
	return n
}

// statFields returns the fields of a /proc stat file after the command's
// name (state first), or nil when it cannot be read (the process is gone).
func statFields(path string) []string {
	data, err := os.ReadFile(path)
	i := bytes.LastIndexByte(data, ')')
	if err != nil || i < 0 {
		return nil
	}
	return strings.Fields(string(data[i+1:]))
}

// running reports whether the guest's process is alive.
func (hd *handle) running() bool {
	return hd.PID > 0 && procStart(hd.PID) == hd.Start
}

func (hd *handle) state() *sdk.GuestState {
	if hd.running() {
		return &sdk.GuestState{Status: sdk.StatusRunning, PID: int64(hd.PID)}
	}
	return &sdk.GuestState{Status: sdk.StatusStopped}
}

// Info names the backend and its capabilities.
func (b *Backend) Info(context.Context) (*sdk.Info, error) {
	return &sdk.Info{
		Name:    Name,
		Version: b.version,
		Capabilities: []sdk.Capability{
			sdk.CapLinkHybrid, sdk.CapRingBuffer, sdk.CapRecover,
		},
		ConfigPrefixes: []string{configPrefix},
		ConfigSchema:   schema,
	}, nil
}

// Create checks the spec and returns a handle; nothing runs yet.
func (b *Backend) Create(_ context.Context, spec *sdk.GuestSpec) (sdk.Handle, error) {
	if spec.UUID == "" {
		return nil, fmt.Errorf("creating guest %q: missing uuid: %w", spec.Name, sdk.ErrInvalid)
	}
	for k := range spec.Config {
		if strings.HasPrefix(k, configPrefix) && !knownKeys[k] {
			return nil, fmt.Errorf("creating guest %q: unknown config key %q: %w", spec.Name, k, sdk.ErrInvalid)
		}
	}
	cmd := spec.Config["example.command"]
	if cmd == "" {
		cmd = "sleep 3600"
	}
	if err := guestPaths(spec.UUID).check(); err != nil {
		return nil, fmt.Errorf("creating guest %q: %w", spec.Name, err)
	}
	return (&handle{UUID: spec.UUID, Name: spec.Name, Command: cmd}).encode(), nil
}

// Start runs the guest's command in a session of its own.
func (b *Backend) Start(_ context.Context, h sdk.Handle, spec *sdk.GuestSpec) (sdk.Handle, *sdk.GuestState, error) {
	hd, err := decode(h)
	if err != nil {
		return nil, nil, fmt.Errorf("starting guest: %w", err)
	}
	if hd.running() {
		return nil, nil, fmt.Errorf("starting guest %q: already running: %w", hd.Name, sdk.ErrConflict)
	}
	p := guestPaths(hd.UUID)
	var files []sdk.File
	if spec != nil {
		files = spec.Files
	}
	if err := p.prepare(files); err != nil {
		return nil, nil, fmt.Errorf("starting guest %q: %w", hd.Name, err)
	}
	if _, err := b.openRing(hd.UUID); err != nil { // before the agent writes STARTED
		return nil, nil, fmt.Errorf("starting guest %q: %w", hd.Name, err)
	}
	env, err := b.agentEnv(p)
	if err != nil {
		return nil, nil, fmt.Errorf("starting guest %q: %w", hd.Name, err)
	}
	cmd := exec.Command("/bin/sh", "-c", hd.Command)
	cmd.Dir = p.root()
	// A guest gets an environment built from nothing, never the plugin's
	// (the daemon's, go-plugin's handshake): docs/environment.md.
	cmd.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "GUESTLINK_INSTANCE=" + hd.Name}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // outlive the plugin
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("starting guest %q: %w", hd.Name, err)
	}
	hd.PID, hd.Start = cmd.Process.Pid, procStart(cmd.Process.Pid)
	done := make(chan struct{})
	b.mu.Lock()
	b.children[hd.PID] = done
	b.mu.Unlock()
	go func(uuid string) {
		err := cmd.Wait()
		b.mu.Lock()
		delete(b.children, cmd.Process.Pid)
		b.mu.Unlock()
		close(done)
		// Status 0 is a guest that powered itself off; a signal or
		// another status, a crash (docs/plugins.md).
		ev := sdk.Event{UUID: uuid, Kind: sdk.EventExited, Detail: "exit status 0", Exit: sdk.ExitPoweroff, Time: time.Now()}
		if err != nil {
			ev.Detail, ev.Exit = err.Error(), sdk.ExitCrash
		}
		b.events.Emit(ev)
	}(hd.UUID)
	return hd.encode(), &sdk.GuestState{Status: sdk.StatusRunning, PID: int64(hd.PID)}, nil
}

// wait waits until the guest's process ended or ctx or d ran out, and
// reports whether it ended.
func (b *Backend) wait(ctx context.Context, hd *handle, d time.Duration) bool {
	b.mu.Lock()
	done := b.children[hd.PID]
	b.mu.Unlock()
	timer := time.NewTimer(d)
	defer timer.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if done == nil && !hd.running() {
			return true
		}
		select {
		case <-done:
			return true
		case <-tick.C:
		case <-timer.C:
			return !hd.running()
		case <-ctx.Done():
			return !hd.running()
		}
	}
}

// Stop ends the guest: SIGTERM to its process group, SIGKILL after the
// timeout (or at once with Force).
func (b *Backend) Stop(ctx context.Context, h sdk.Handle, opts sdk.StopOptions) (*sdk.GuestState, error) {
	hd, err := decode(h)
	if err != nil {
		return nil, fmt.Errorf("stopping guest: %w", err)
	}
	if !hd.running() {
		b.closeRing(hd.UUID)
		return &sdk.GuestState{Status: sdk.StatusStopped}, nil
	}
	if opts.Stateful {
		return nil, fmt.Errorf("stopping guest %q statefully: %w", hd.Name, sdk.ErrNotSupported)
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	if !opts.Force {
		_ = syscall.Kill(-hd.PID, syscall.SIGTERM)
		if b.wait(ctx, hd, timeout) {
			endGroup(ctx, hd.PID)
			b.closeRing(hd.UUID)
			return &sdk.GuestState{Status: sdk.StatusStopped}, nil
		}
	}
	_ = syscall.Kill(-hd.PID, syscall.SIGKILL)
	if !b.wait(ctx, hd, 10*time.Second) {
		return nil, fmt.Errorf("stopping guest %q: process %d did not end: %w", hd.Name, hd.PID, sdk.ErrUnavailable)
	}
	endGroup(ctx, hd.PID)
	b.closeRing(hd.UUID)
	return &sdk.GuestState{Status: sdk.StatusStopped}, nil
}

// endGroup kills what is left of a guest's process group once its leader
// (the shell) ended: a process of the guest that survived the signal (one
// that ignores SIGTERM, say) must not outlive a guest reported stopped.
// It is called right after this Stop saw the leader end, so the group's
// ID cannot yet have been reused by a process of someone else: the kernel
// does not hand out a PID that is still a process group's ID.
func endGroup(ctx context.Context, pgid int) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for range 500 { // 5 s at most
		if !groupAlive(pgid) {
			return
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// groupAlive reports whether a process of group pgid still runs. Zombies
// do not count: kill(2) still finds them, but they are dead, waiting for
// whoever adopted them to reap them.
func groupAlive(pgid int) bool {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return syscall.Kill(-pgid, 0) == nil
	}
	for _, e := range procs {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		// After the command's name: state, ppid, pgrp.
		f := statFields(filepath.Join("/proc", e.Name(), "stat"))
		if len(f) >= 3 && f[0] != "Z" && f[0] != "X" && f[2] == strconv.Itoa(pgid) {
			return true
		}
	}
	return false
}

// Delete removes a stopped guest's files.
func (b *Backend) Delete(_ context.Context, h sdk.Handle) error {
	hd, err := decode(h)
	if err != nil {
		return fmt.Errorf("deleting guest: %w", err)
	}
	if hd.running() {
		return fmt.Errorf("deleting guest %q: still running: %w", hd.Name, sdk.ErrConflict)
	}
	b.closeRing(hd.UUID)
	if err := os.RemoveAll(guestPaths(hd.UUID).dir); err != nil {
		return fmt.Errorf("deleting guest %q: %w", hd.Name, err)
	}
	return nil
}

// State reports whether the guest's process runs.
func (b *Backend) State(_ context.Context, h sdk.Handle) (*sdk.GuestState, error) {
	hd, err := decode(h)
	if err != nil {
		return nil, fmt.Errorf("reading guest state: %w", err)
	}
	return hd.state(), nil
}

// Events streams guest exits until ctx ends, under the eventer's drop
// policy.
func (b *Backend) Events(ctx context.Context) (<-chan sdk.Event, error) {
	return b.events.Stream(ctx)
}

// ReadRing reads and consumes what the guest's agent wrote to its ring
// port.
func (b *Backend) ReadRing(ctx context.Context, h sdk.Handle, max int) ([]byte, error) {
	hd, err := decode(h)
	if err != nil {
		return nil, fmt.Errorf("reading ring buffer: %w", err)
	}
	return b.readRing(ctx, hd, max)
}

// LinkEndpoint names the hybrid socket the guest's agent listens on.
func (b *Backend) LinkEndpoint(_ context.Context, h sdk.Handle) (*sdk.LinkEndpoint, error) {
	hd, err := decode(h)
	if err != nil {
		return nil, fmt.Errorf("reading link endpoint: %w", err)
	}
	if !hd.running() {
		return nil, fmt.Errorf("reading link endpoint of guest %q: not running: %w", hd.Name, sdk.ErrConflict)
	}
	return &sdk.LinkEndpoint{Kind: sdk.LinkHybrid, Path: guestPaths(hd.UUID).link()}, nil
}

// Recover re-attaches to a guest started by an earlier plugin process.
func (b *Backend) Recover(_ context.Context, h sdk.Handle, _ *sdk.GuestSpec) (sdk.Handle, *sdk.GuestState, error) {
	hd, err := decode(h)
	if err != nil {
		return nil, nil, fmt.Errorf("recovering guest: %w", err)
	}
	if hd.running() {
		b.adopt(hd)
	}
	return hd.encode(), hd.state(), nil
}

// adopt watches a guest started by an earlier plugin process, so its exit
// is still reported as an event.
func (b *Backend) adopt(hd *handle) {
	b.mu.Lock()
	_, own := b.children[hd.PID]
	if own || b.watched[hd.PID] {
		b.mu.Unlock()
		return
	}
	b.watched[hd.PID] = true
	b.mu.Unlock()
	go func() {
		for hd.running() {
			time.Sleep(50 * time.Millisecond)
		}
		b.mu.Lock()
		delete(b.watched, hd.PID)
		b.mu.Unlock()
		// Not our child: its exit status is unknown (ExitUnspecified).
		b.events.Emit(sdk.Event{UUID: hd.UUID, Kind: sdk.EventExited, Detail: "process ended", Time: time.Now()})
	}()
}
