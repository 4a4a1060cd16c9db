package fleetbackend

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/guestlink/guestlink/agent"
	"github.com/guestlink/guestlink/agent/devlxdclient"
	"github.com/guestlink/guestlink/link/devlxdapi"
	"github.com/guestlink/guestlink/link/ringproto"
	"github.com/guestlink/guestlink/link/transport"
	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/shared/ringbuffer"
)

// ringDataInterval is the least time between two RING_DATA events of a
// guest (the sim VMM's pacing).
const ringDataInterval = 20 * time.Millisecond

// guest is one simulated guest. Start, Stop and Delete take turns on it.
type guest struct {
	h    *handle
	ring *ringbuffer.Ring
	turn chan struct{}

	// pushMu orders the drains of ring into events: ringSeq is the
	// sequence number of the last one (push.go).
	pushMu  sync.Mutex
	ringSeq uint64
	repeat  sdk.RingRepeat // which drains are heartbeats, under pushMu

	mu         sync.Mutex
	run        *boot // nil while stopped
	boots      int
	exitStatus string
}

// boot is one run of a guest.
type boot struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when the boot has ended and is recorded
	fifo   *os.File      // the host side of the wired port
	port   string        // the wired port's path
	reason atomic.Value  // string: why it ends (ExitClean, ExitKilled, ExitCrashed)

	lastEmit   atomic.Int64 // unix nanos of the last RING_DATA
	emitQueued atomic.Bool
}

func (g *guest) lock(ctx context.Context) (func(), error) {
	select {
	case g.turn <- struct{}{}:
		return func() { <-g.turn }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("guest %q is busy: %w", g.h.ID, ctx.Err())
	}
}

func (g *guest) running() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.run != nil
}

func (g *guest) state() *sdk.GuestState {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := &sdk.GuestState{Details: map[string]string{
		DetailDevlxdSocket: devlxdSocket(g.h.Dir),
		DetailGuestDir:     g.h.Dir,
		DetailLayout:       "current",
	}}
	if g.run != nil {
		st.Status = sdk.StatusRunning
		st.PID = int64(os.Getpid())
		st.Details[DetailBoot] = itoa(g.boots)
		st.Details[DetailRingSize] = itoa(RingSize)
		return st
	}
	st.Status = sdk.StatusStopped
	if g.exitStatus != "" {
		st.Details[DetailExitStatus] = g.exitStatus
	}
	return st
}

// buildRoot makes the stand-in root as the sim VMM does: the wired port as
// a FIFO, an empty /dev/lxd, no stale sockets and a fresh config drive.
func buildRoot(dir string, files []sdk.File) error {
	ports := portsDir(dir)
	for _, d := range []string{ports, filepath.Dir(devlxdSocket(dir))} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("building root: %w", err)
		}
	}
	port := filepath.Join(ports, ringproto.PortCurrent)
	for _, stale := range []string{port, devlxdSocket(dir), linkSocket(dir)} {
		if err := os.Remove(stale); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing stale %s: %w", stale, err)
		}
	}
	if err := syscall.Mkfifo(port, 0o600); err != nil {
		return fmt.Errorf("creating port %s: %w", port, err)
	}
	drive := configDrive(dir)
	if err := os.RemoveAll(drive); err != nil {
		return fmt.Errorf("clearing config drive: %w", err)
	}
	if err := os.MkdirAll(drive, 0o700); err != nil {
		return fmt.Errorf("creating config drive: %w", err)
	}
	for _, f := range files {
		name := filepath.Join(drive, filepath.FromSlash(f.Path))
		mode := os.FileMode(f.Mode) & os.ModePerm
		if mode == 0 {
			mode = 0o600
		}
		if err := os.MkdirAll(filepath.Dir(name), 0o700); err != nil {
			return fmt.Errorf("writing config drive file %s: %w", f.Path, err)
		}
		if err := os.WriteFile(name, f.Data, mode); err != nil {
			return fmt.Errorf("writing config drive file %s: %w", f.Path, err)
		}
		if err := os.Chmod(name, mode); err != nil {
			return fmt.Errorf("writing config drive file %s: %w", f.Path, err)
		}
	}
	return nil
}

func newBootID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// start boots the guest; the caller holds its turn.
func (g *guest) start(b *Backend, spec *sdk.GuestSpec, beh Behaviour) error {
	if g.running() {
		return fmt.Errorf("it is running: %w", sdk.ErrConflict)
	}
	dir := g.h.Dir
	if err := buildRoot(dir, spec.Files); err != nil {
		return err
	}
	port := filepath.Join(portsDir(dir), ringproto.PortCurrent)
	// Held read-write like the sim VMM holds it: the guest closing the port
	// never makes the host side see EOF, and writers never meet ENXIO.
	fifo, err := os.OpenFile(port, os.O_RDWR|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening port %s: %w", port, err)
	}
	hb := beh.Heartbeat
	r := mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), uint64(len(g.h.ID))^uint64(g.h.ID[0])))
	if hb > 0 {
		hb = beh.jittered(r, hb)
	}
	// A config drive without the agent's credentials is an image without
	// the agent: the guest runs, its ring stays silent.
	var a *agent.Agent
	if hasFile(spec.Files, agent.AgentCertFile) {
		a, err = g.newAgent(b, hb)
		if err != nil {
			fifo.Close()
			return fmt.Errorf("starting agent: %v: %w", err, sdk.ErrInvalid)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	bt := &boot{cancel: cancel, done: make(chan struct{}), fifo: fifo, port: port}
	bt.reason.Store(ExitClean)
	g.mu.Lock()
	g.run = bt
	g.boots++
	g.exitStatus = ""
	g.mu.Unlock()

	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		g.ringLoop(b, bt)
	}()
	go func() {
		g.life(ctx, b, bt, a, beh, r)
		fifo.Close()
		<-readerDone
		reason, _ := bt.reason.Load().(string)
		g.mu.Lock()
		g.run = nil
		g.exitStatus = reason
		g.mu.Unlock()
		kind := sdk.ExitCrash
		if reason == ExitClean {
			kind = sdk.ExitPoweroff
		}
		b.events.Emit(sdk.Event{UUID: g.h.UUID, Kind: sdk.EventExited, Detail: reason, Exit: kind, Time: time.Now()})
		close(bt.done)
	}()
	return nil
}

// life runs one boot: the boot delay, the agent, and the guest's
// behaviour (declaring Ready, flapping, crashing), until ctx ends.
func (g *guest) life(ctx context.Context, b *Backend, bt *boot, a *agent.Agent, beh Behaviour, r *mrand.Rand) {
	if beh.CrashAfter > 0 {
		t := time.AfterFunc(beh.jittered(r, beh.CrashAfter), func() { g.kill(bt, ExitCrashed) })
		defer t.Stop()
	}
	if beh.BootDelay > 0 {
		t := time.NewTimer(beh.jittered(r, beh.BootDelay))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
	if a == nil {
		<-ctx.Done()
		return
	}
	agentDone := make(chan struct{})
	go func() {
		defer close(agentDone)
		_ = a.Run(ctx)
	}()
	if beh.ReadyAfter >= 0 {
		g.userland(ctx, beh, r)
	}
	<-agentDone
}

// userland is what the guest's own software does on its devlxd socket:
// declare Ready after ReadyAfter and, with FlapEvery, drop out of Ready
// (Started) and back every period.
func (g *guest) userland(ctx context.Context, beh Behaviour, r *mrand.Rand) {
	c := devlxdclient.New(devlxdSocket(g.h.Dir))
	defer c.CloseIdleConnections()
	if !sleep(ctx, beh.jittered(r, beh.ReadyAfter)) {
		return
	}
	if !declare(ctx, c, devlxdapi.StateReady) {
		return
	}
	for beh.FlapEvery > 0 {
		c.CloseIdleConnections()
		if !sleep(ctx, beh.jittered(r, beh.FlapEvery)) {
			return
		}
		if !declare(ctx, c, devlxdapi.StateStarted) {
			return
		}
		if !sleep(ctx, beh.jittered(r, beh.FlapEvery/4)) {
			return
		}
		if !declare(ctx, c, devlxdapi.StateReady) {
			return
		}
	}
	<-ctx.Done()
}

// sleep waits d or until ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// kill ends the boot at once without the agent's STOPPED word: the port
// goes first, as a crashed or killed VM writes nothing more.
func (g *guest) kill(bt *boot, reason string) {
	bt.reason.Store(reason)
	_ = os.Remove(bt.port)
	bt.cancel()
}

// stop ends the running boot, gracefully unless force; the caller holds
// the turn.
func (g *guest) stop(ctx context.Context, force bool, timeout time.Duration) error {
	g.mu.Lock()
	bt := g.run
	g.mu.Unlock()
	if bt == nil {
		return nil
	}
	if force {
		g.kill(bt, ExitKilled)
	} else {
		bt.cancel()
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-bt.done:
		return nil
	case <-t.C:
		g.kill(bt, ExitKilled)
	case <-ctx.Done():
		g.kill(bt, ExitKilled)
	}
	select {
	case <-bt.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the guest to end: %w", ctx.Err())
	}
}

// ringLoop copies the port into the ring and announces writes: at once
// after a quiet spell, then at most once per ringDataInterval.
func (g *guest) ringLoop(b *Backend, bt *boot) {
	buf := make([]byte, 256)
	for {
		n, err := bt.fifo.Read(buf)
		if n > 0 {
			g.ring.Write(buf[:n])
			g.announce(b, bt)
		}
		if err != nil {
			return
		}
	}
}

func (g *guest) announce(b *Backend, bt *boot) {
	emit := func() {
		bt.lastEmit.Store(time.Now().UnixNano())
		b.events.Emit(sdk.Event{UUID: g.h.UUID, Kind: sdk.EventRingData, Port: ringproto.PortCurrent, Time: time.Now()})
	}
	since := time.Duration(time.Now().UnixNano() - bt.lastEmit.Load())
	if since >= ringDataInterval {
		emit()
		return
	}
	if bt.emitQueued.CompareAndSwap(false, true) {
		time.AfterFunc(ringDataInterval-since, func() {
			bt.emitQueued.Store(false)
			emit()
		})
	}
}

func hasFile(files []sdk.File, path string) bool {
	for _, f := range files {
		if f.Path == path {
			return true
		}
	}
	return false
}

// newAgent makes the guest's agent, the real one, run in this process.
func (g *guest) newAgent(b *Backend, hb time.Duration) (*agent.Agent, error) {
	dir := g.h.Dir
	return agent.New(agent.Config{
		Root:           rootDir(dir),
		ConfigDir:      configDrive(dir),
		StateDir:       stateDir(dir),
		VirtioPortsDir: portsDir(dir),
		DevlxdSocket:   devlxdSocket(dir),
		Link:           &transport.Hybrid{UDS: linkSocket(dir)},
		Heartbeat:      hb,
		BootID:         newBootID(),
		Version:        b.version,
		Log:            b.agentLg.With("guest", g.h.Name),
	})
}
