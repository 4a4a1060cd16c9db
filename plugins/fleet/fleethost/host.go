// Package fleethost runs the fleet backend's guests in a process of their
// own, the fleet host, so that they outlive the plugin process as a VMM
// outlives the plugin that started it (docs/fleet.md). The host serves the
// SDK's Backend gRPC service on <data dir>/host.sock (0600); the plugin
// process is a thin proxy that starts the host when none answers and
// forwards every call to it. The host exits when no guest runs and no
// plugin is connected.
package fleethost

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/guestlink/guestlink/plugins/fleet/fleetbackend"
	"github.com/guestlink/guestlink/plugins/sdk"
)

// Subcommand is the plugin binary's argument that runs the host:
// "fleet host <data dir>".
const Subcommand = "host"

// Files of the data dir.
const (
	SocketName = "host.sock"
	LockName   = "host.lock"
	LogName    = "host.log"
	PIDName    = "host.pid"
)

// idleCheck is how often the host looks whether a guest that crashed by
// itself left it idle; closing connections are checked at once.
const idleCheck = 5 * time.Second

// idleGrace is how long the host stays idle before it exits.
const idleGrace = 3 * time.Second

// firstClientTimeout is how long a host waits for its first plugin.
const firstClientTimeout = 30 * time.Second

// Main runs the host with args ("<data dir>") and returns the exit code.
// The ready pipe, when the launcher passes one as fd 3, is closed once the
// socket listens.
func Main(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: fleet host <data dir>")
		return 2
	}
	var ready *os.File
	if f := os.NewFile(3, "ready"); f != nil {
		if _, err := f.Stat(); err == nil {
			ready = f
		}
	}
	if err := Serve(args[0], ready); err != nil {
		fmt.Fprintln(os.Stderr, "fleet host:", err)
		if ready != nil {
			fmt.Fprintln(ready, err)
			ready.Close()
		}
		return 1
	}
	return 0
}

// Serve runs a host on dataDir until it is idle or signalled.
func Serve(dataDir string, ready *os.File) error {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dataDir, LockName), os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("opening host lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return fmt.Errorf("another fleet host holds %s: %w", lock.Name(), err)
	}
	pidFile := filepath.Join(dataDir, PIDName)
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", pidFile, err)
	}
	defer os.Remove(pidFile)
	sock := filepath.Join(dataDir, SocketName)
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing stale socket: %w", err)
	}
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", sock)
	syscall.Umask(old)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", sock, err)
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "fleet-host", Output: os.Stderr, Level: hclog.Info})
	b, err := fleetbackend.New(fleetbackend.Options{
		DataDir:  dataDir,
		Logger:   log,
		AgentLog: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		ln.Close()
		return err
	}
	cl := &countingListener{Listener: ln, closed: make(chan struct{}, 1)}
	srv := grpc.NewServer()
	_ = (&sdk.GRPCPlugin{Impl: b}).GRPCServer(nil, srv)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(cl) }()
	if ready != nil {
		ready.Close()
	}
	log.Info("fleet host listening", "socket", sock, "pid", os.Getpid())

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	tick := time.NewTicker(idleCheck)
	defer tick.Stop()
	first := time.NewTimer(firstClientTimeout)
	defer first.Stop()
	// The host exits once it has been idle (no plugin connected, no guest
	// running, nothing accepted) for a whole idleGrace: a plugin probing
	// the socket before it connects for good must not find it gone.
	firstExpired := false
	var graceC <-chan time.Time
	var graceAccepted int64
	idle := func() bool { return cl.open.Load() == 0 && b.Running() == 0 }
	for {
		select {
		case <-cl.closed:
		case <-tick.C:
		case <-first.C:
			firstExpired = true
		case <-graceC:
			graceC = nil
			if idle() && cl.accepted.Load() == graceAccepted {
				log.Info("fleet host idle, exiting")
				srv.Stop()
				_ = os.Remove(sock)
				return nil
			}
		case sig := <-sigs:
			log.Info("fleet host stopping its guests", "signal", sig.String())
			b.Close()
			srv.Stop()
			return nil
		case err := <-served:
			b.Close()
			return fmt.Errorf("serving: %w", err)
		}
		if cl.accepted.Load() == 0 && !firstExpired {
			continue
		}
		if graceC == nil && idle() {
			graceAccepted = cl.accepted.Load()
			graceC = time.After(idleGrace)
		}
	}
}

// countingListener counts the open connections and signals each close.
type countingListener struct {
	net.Listener
	open     atomic.Int64
	accepted atomic.Int64
	closed   chan struct{}
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.open.Add(1)
	l.accepted.Add(1)
	return &countedConn{Conn: c, l: l}, nil
}

type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.open.Add(-1)
		select {
		case c.l.closed <- struct{}{}:
		default:
		}
	})
	return err
}
