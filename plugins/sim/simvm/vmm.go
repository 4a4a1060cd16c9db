package simvm

import (
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/guestlink/guestlink/plugins/shared/ringbuffer"
)

// Subcommand is the first argument that makes the sim plugin binary run as a
// VMM: "<binary> vmm <guest dir>".
const Subcommand = "vmm"

// Timing of a VMM.
const (
	// ContTimeout is how long a VMM waits for CmdCont before giving up.
	ContTimeout = time.Minute
	// drainTimeout bounds how long an exiting VMM waits for subscribers to
	// receive the last events.
	drainTimeout = 5 * time.Second
	// maxLine bounds a control protocol line.
	maxLine = 64 << 10
)

// Environment variables the guest command receives; they, PATH and nothing
// else are its whole environment (guestEnv, docs/sim.md).
const (
	// EnvRoot, EnvAgent and EnvInstance are for the guest command itself:
	// the stand-in root, the agent binary, the instance's name.
	EnvRoot     = "GUESTLINK_ROOT"
	EnvAgent    = "GUESTLINK_AGENT"
	EnvInstance = "GUESTLINK_INSTANCE"
	// EnvAgentRoot, EnvAgentLink and EnvAgentDevlxdSocket are the agent's
	// own variables (cmd/guestlink-agent): its root, its link to the
	// daemon and the socket its client commands talk to.
	EnvAgentRoot         = "GUESTLINK_AGENT_ROOT"
	EnvAgentLink         = "GUESTLINK_AGENT_LINK"
	EnvAgentDevlxdSocket = "GUESTLINK_AGENT_DEVLXD_SOCKET"
	// SystemPath is a VMM's PATH, and a guest's after the agent's
	// directory.
	SystemPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// ReadyEnv tells a VMM which fd is its readiness pipe.
	ReadyEnv         = "GUESTLINK_SIM_READY_FD"
	readyFD          = 3 // Launch passes the readiness pipe as fd 3
	readyOK          = "ok"
	readyErrorPrefix = "error: "
)

// Main runs a VMM for "<binary> vmm <guest dir>" (args without the
// subcommand) and returns the process exit status. It reports readiness or a
// start-up failure on fd 3 when that is a pipe from Launch.
func Main(args []string) int {
	log.SetFlags(log.LstdFlags | log.Lmicroseconds | log.LUTC)
	log.SetPrefix(fmt.Sprintf("vmm[%d] ", os.Getpid()))
	ready := readyPipe()
	if len(args) != 1 || !filepath.IsAbs(args[0]) {
		err := fmt.Errorf("usage: %s %s <absolute guest dir>", filepath.Base(os.Args[0]), Subcommand)
		reportReady(ready, err)
		log.Print(err)
		return 2
	}
	if err := Run(Paths{Dir: filepath.Clean(args[0])}, ready); err != nil {
		log.Print(err)
		return 1
	}
	return 0
}

// readyPipe returns the readiness pipe Launch passed, or nil when the VMM was
// started some other way (by hand): fd 3 is used only when ReadyEnv says so
// and it is a pipe.
func readyPipe() *os.File {
	if os.Getenv(ReadyEnv) != fmt.Sprint(readyFD) {
		return nil
	}
	os.Unsetenv(ReadyEnv)
	var st syscall.Stat_t
	if err := syscall.Fstat(readyFD, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		return nil
	}
	return os.NewFile(readyFD, "ready")
}

func reportReady(ready *os.File, err error) {
	if ready == nil {
		return
	}
	if err != nil {
		fmt.Fprintf(ready, "%s%v\n", readyErrorPrefix, err)
	} else {
		fmt.Fprintln(ready, readyOK)
	}
	ready.Close()
}

// started is the outcome of starting the guest command for cont.
type started struct {
	st  Status
	err error
}

// ErrBusy is the kind of error a VMM fails with when another VMM already
// runs the guest directory.
var ErrBusy = errors.New("another vmm runs this guest")

// vmm is one running VMM.
type vmm struct {
	cfg      *Config
	paths    Paths
	ring     *ringbuffer.Ring
	ringPort string
	ln       net.Listener
	fifo     *os.File
	serial   *serialRelay // the serial link, when Config.Link is LinkSerial
	watch    *portWatch
	lock     *os.File
	started  time.Time
	received atomic.Uint64

	mu        sync.Mutex
	state     string
	guestPID  int // also the guest's process group id
	boot      int
	resetReq  bool
	powerdown bool
	reason    string // set by quit
	subs      map[*conn]struct{}
	contReq   chan struct{} // closed by the first cont
	quitReq   chan struct{} // closed by quit or a signal
	contDone  chan started  // the result of starting the guest after cont
	contOnce  sync.Once
	quitOnce  sync.Once
	conns     sync.WaitGroup
	connsOpen map[*conn]struct{}
}

// Run runs the VMM of the guest directory p until its guest ends. ready (may
// be nil) receives "ok" once the control socket listens, or the start-up
// error.
func Run(p Paths, ready *os.File) (err error) {
	v := &vmm{
		paths:     p,
		state:     StatePaused,
		subs:      map[*conn]struct{}{},
		connsOpen: map[*conn]struct{}{},
		contReq:   make(chan struct{}),
		quitReq:   make(chan struct{}),
		contDone:  make(chan started, 1),
		started:   time.Now(),
	}
	// Signals are handled from the start, so a VMM told to end always
	// records how its guest ended. SIGHUP is ignored (no terminal).
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	go func() {
		for s := range sigs {
			if s == syscall.SIGHUP {
				continue
			}
			log.Printf("received %v: quitting", s)
			v.quit("vmm received " + s.String())
		}
	}()
	if err := v.setup(); err != nil {
		err = fmt.Errorf("starting vmm in %s: %w", p.Dir, err)
		if errors.Is(err, ErrBusy) {
			reportReady(ready, err)
			return err // the guest belongs to the running VMM: touch nothing
		}
		_ = WriteExitRecord(p, &ExitRecord{Reason: ReasonError, Status: "not started", Code: -1,
			Message: err.Error(), VMMPID: os.Getpid(), ExitedAt: time.Now()})
		reportReady(ready, err)
		v.cleanup()
		return err
	}
	reportReady(ready, nil)
	log.Printf("vmm for %q (%s) listening on %s, ring %d bytes on %s", v.cfg.Name, v.cfg.UUID, p.Control(), v.ring.Size(), v.ringPort)

	go v.acceptLoop()
	go v.ringLoop()
	if v.watch != nil {
		go v.watch.run(v)
	}

	rec := v.runGuest()
	if werr := WriteExitRecord(p, rec); werr != nil {
		log.Print(werr)
	}
	log.Printf("guest ended: reason %s, %s (%s)", rec.Reason, rec.Status, rec.Message)
	v.emit(EventExited, rec, "")
	v.shutdown()
	return nil
}

// setup reads the configuration, builds the stand-in root and listens on
// the control socket.
func (v *vmm) setup() error {
	lock, err := os.OpenFile(v.paths.Lock(), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("opening vmm lock: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return fmt.Errorf("%w: %w", ErrBusy, err)
	}
	v.lock = lock // held (and never closed) until the process exits
	cfg, err := ReadConfig(v.paths)
	if err != nil {
		return err
	}
	v.cfg = cfg
	if v.ring, err = ringbuffer.New(cfg.RingSize); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	_ = os.Remove(v.paths.Exit())
	if n := KillStrays(v.paths); n > 0 {
		log.Printf("killed %d processes left over from an earlier boot", n)
	}
	if err := v.buildRoot(); err != nil {
		return err
	}
	if cfg.Link == LinkSerial {
		if v.serial, err = startSerial(v.paths); err != nil {
			return err
		}
	}
	wired, _ := cfg.Layout.Ports()
	v.ringPort = wired
	// O_RDWR keeps a writer on the FIFO, so guests closing it never make
	// the reader see EOF, and opening never blocks.
	if v.fifo, err = os.OpenFile(v.paths.Port(wired), os.O_RDWR, 0); err != nil {
		return fmt.Errorf("opening port %s: %w", wired, err)
	}
	// Port events are optional (ring-data events still flow): without an
	// inotify instance to spare the guest runs, said once in the log.
	if v.watch, err = v.watchPort(wired); errors.Is(err, errNoInotify) {
		log.Printf("%v: running without port open/close events (raise fs.inotify.max_user_instances to have them)", err)
	} else if err != nil {
		return err
	}
	_ = os.Remove(v.paths.Control())
	old := syscall.Umask(0o177)
	v.ln, err = net.Listen("unix", v.paths.Control())
	syscall.Umask(old)
	if err != nil {
		return fmt.Errorf("listening on control socket: %w", err)
	}
	return nil
}

// runGuest waits for cont, runs the guest command (again after each
// system_reset) and returns how it ended.
func (v *vmm) runGuest() *ExitRecord {
	rec := &ExitRecord{VMMPID: os.Getpid()}
	timer := time.NewTimer(ContTimeout)
	defer timer.Stop()
	select {
	case <-v.contReq:
	case <-v.quitReq:
		rec.Reason, rec.Status, rec.Code, rec.ExitedAt = ReasonQuit, "not started", -1, time.Now()
		rec.Message = v.quitReason()
		return rec
	case <-timer.C:
		rec.Reason, rec.Status, rec.Code, rec.ExitedAt = ReasonError, "not started", -1, time.Now()
		rec.Message = fmt.Sprintf("no %s within %v", CmdCont, ContTimeout)
		return rec
	}
	console, err := os.OpenFile(v.paths.Console(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		err = fmt.Errorf("opening console log: %w", err)
		v.contDone <- started{err: err}
		rec.Reason, rec.Status, rec.Code, rec.Message, rec.ExitedAt = ReasonError, "not started", -1, err.Error(), time.Now()
		return rec
	}
	defer console.Close()
	first := true
	for {
		cmd, st, err := v.startGuest(console)
		if first {
			v.contDone <- started{st: st, err: err}
			first = false
		}
		if err != nil {
			rec.Reason, rec.Status, rec.Code, rec.Message, rec.ExitedAt = ReasonError, "not started", -1, err.Error(), time.Now()
			rec.Boot = v.bootCount()
			return rec
		}
		waitErr := cmd.Wait()
		// Power off: nothing of the guest survives its main process, not
		// even what left its process group.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		KillStrays(v.paths)
		v.mu.Lock()
		reset := v.resetReq
		v.resetReq = false
		quitting := v.reason != ""
		if reset && !quitting {
			v.mu.Unlock()
			fmt.Fprintf(console, "\n--- sim: system_reset, guest restarting ---\n")
			// The killed boot's sockets would make the next agent's bind
			// fail (EADDRINUSE); a rebooted machine has none of them.
			for _, stale := range []string{v.paths.DevlxdSocket(), v.paths.Link()} {
				if err := os.Remove(stale); err != nil && !errors.Is(err, os.ErrNotExist) {
					log.Printf("removing stale socket after system_reset: %v", err)
				}
			}
			continue
		}
		v.state = StateShutdown
		rec.Boot = v.boot
		rec.Reason = ReasonGuest
		switch {
		case quitting:
			rec.Reason, rec.Message = ReasonQuit, v.reason
		case v.powerdown:
			rec.Reason = ReasonPowerdown
		}
		v.mu.Unlock()
		rec.Status, rec.Code = describeExit(cmd.ProcessState, waitErr)
		rec.ExitedAt = time.Now()
		return rec
	}
}

func describeExit(ps *os.ProcessState, waitErr error) (string, int) {
	if ps == nil {
		return fmt.Sprintf("wait failed: %v", waitErr), -1
	}
	return ps.String(), ps.ExitCode()
}

// startGuest starts the guest command in a process group of its own; the
// guest is killed if the VMM dies.
func (v *vmm) startGuest(console *os.File) (*exec.Cmd, Status, error) {
	cmd := exec.Command("/bin/sh", "-c", v.cfg.Command)
	cmd.Dir = v.paths.Root()
	cmd.Stdin = nil
	cmd.Stdout = console
	cmd.Stderr = console
	cmd.Env = v.guestEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := writeBootID(v.paths); err != nil {
		return nil, Status{}, err
	}
	v.mu.Lock()
	if v.reason != "" {
		v.mu.Unlock()
		return nil, Status{}, fmt.Errorf("guest not started: %s", v.reason)
	}
	if err := cmd.Start(); err != nil {
		v.mu.Unlock()
		return nil, Status{}, fmt.Errorf("starting guest command: %w", err)
	}
	v.guestPID = cmd.Process.Pid
	v.boot++
	v.state = StateRunning
	st := v.statusLocked()
	v.mu.Unlock()
	log.Printf("guest command started, pid %d, boot %d", st.GuestPID, st.Boot)
	if st.Boot > 1 {
		v.emit(EventReset, st, "")
	}
	return cmd, st, nil
}

// guestEnv is the guest command's whole environment, built from nothing:
// the VMM's own (and through it the plugin's and the daemon's) is never
// passed on, so no variable of the host's (GUESTLINK_CONFIG_DIR of a CLI,
// credentials, proxies) reaches the guest or is read by its agent.
func (v *vmm) guestEnv() []string {
	path := SystemPath
	if v.cfg.Agent != "" {
		path = filepath.Dir(v.cfg.Agent) + string(os.PathListSeparator) + path
	}
	return []string{
		"PATH=" + path,
		EnvRoot + "=" + v.paths.Root(),
		EnvAgent + "=" + v.cfg.Agent,
		EnvInstance + "=" + v.cfg.Name,
		EnvAgentRoot + "=" + v.paths.Root(),
		EnvAgentLink + "=" + v.linkSpec(),
		EnvAgentDevlxdSocket + "=" + v.paths.DevlxdSocket(),
	}
}

// VMMEnv is the environment a VMM is started with: PATH alone. A VMM reads
// no variable (Launch adds ReadyEnv) and passes none to its guest.
func VMMEnv() []string {
	return []string{"PATH=" + SystemPath}
}

func (v *vmm) bootCount() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.boot
}

func (v *vmm) quitReason() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.reason
}

// quit kills the guest (or makes a paused VMM give up) and lets runGuest
// record the exit.
func (v *vmm) quit(reason string) {
	v.mu.Lock()
	if v.reason == "" {
		v.reason = reason
	}
	pid := v.guestPID
	running := v.state == StateRunning
	v.mu.Unlock()
	v.quitOnce.Do(func() { close(v.quitReq) })
	if running && pid > 0 {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
}

// shutdown delivers the queued events, closes every connection and removes
// the control socket.
func (v *vmm) shutdown() {
	v.mu.Lock()
	subs := make([]*conn, 0, len(v.subs))
	for c := range v.subs {
		subs = append(subs, c)
	}
	v.mu.Unlock()
	deadline := time.Now().Add(drainTimeout)
	for _, c := range subs {
		c.events.Close()
		select {
		case <-c.drained:
		case <-time.After(time.Until(deadline)):
		}
	}
	v.cleanup()
	v.mu.Lock()
	for c := range v.connsOpen {
		c.nc.Close()
	}
	v.mu.Unlock()
	v.conns.Wait()
}

// linkSpec is the agent's --link for this guest.
func (v *vmm) linkSpec() string {
	if v.cfg.Link == LinkSerial {
		return "serial:" + SerialPort
	}
	return "hybrid:" + v.paths.Link()
}

func (v *vmm) cleanup() {
	if v.serial != nil {
		v.serial.close()
	}
	if v.ln != nil {
		v.ln.Close()
		_ = os.Remove(v.paths.Control())
	}
	if v.fifo != nil {
		v.fifo.Close()
	}
	if v.watch != nil {
		v.watch.close()
	}
}

func (v *vmm) statusLocked() Status {
	return Status{
		State:     v.state,
		Name:      v.cfg.Name,
		UUID:      v.cfg.UUID,
		VMMPID:    os.Getpid(),
		GuestPID:  v.guestPID,
		Boot:      v.boot,
		Layout:    v.cfg.Layout,
		RingPort:  v.ringPort,
		RingSize:  v.ring.Size(),
		StartedAt: v.started,

		RingReceived: v.received.Load(),
	}
}
