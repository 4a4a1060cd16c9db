// Command guestlink-agent is the in-guest agent of guestlink (see package
// agent) and a small client of /dev/lxd/sock.
//
//	guestlink-agent run [--root DIR] [--config-dir DIR] [--state-dir DIR] [--link SPEC] [--heartbeat 5s] [--tls-per-request]
//	guestlink-agent ready|started|degraded [--socket PATH] [--reason R] [--message M]
//	guestlink-agent wait-host [--socket PATH] [--timeout 60s]
//	guestlink-agent version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/guestlink/guestlink/agent"
	"github.com/guestlink/guestlink/agent/devlxdclient"
	"github.com/guestlink/guestlink/internal/sdnotify"
	"github.com/guestlink/guestlink/link/devlxdapi"
	"github.com/guestlink/guestlink/link/serialmux"
	"github.com/guestlink/guestlink/link/transport"
)

// notifyOnce sends systemd READY=1 once, the first time devlxd answers.
var notifyOnce sync.Once

// version is set with -ldflags "-X main.version=...".
var version = "dev"

const usage = `usage: guestlink-agent <command> [flags]

commands:
  run        run the agent
  ready      declare the guest Ready (PATCH /1.0 on /dev/lxd/sock)
  started    declare the guest Started (not ready)
  degraded   declare the guest Degraded (running, impaired; not ready)
             (ready, started and degraded take --reason WORD --message TEXT)
  wait-host  wait until GET /1.0 on /dev/lxd/sock answers 200
  version    print the version

"guestlink-agent <command> -h" lists a command's flags.
`

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(os.Stderr, "guestlink-agent: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("missing command")
	}
	switch args[0] {
	case "run":
		return runAgent(args[1:], stderr)
	case "ready":
		return declare(args[1:], stderr, devlxdapi.StateReady)
	case "started":
		return declare(args[1:], stderr, devlxdapi.StateStarted)
	case "degraded":
		return declare(args[1:], stderr, devlxdapi.StateDegraded)
	case "wait-host":
		return waitHost(args[1:], stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, version)
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", args[0])
	}
}

// underRoot joins a guest path to the root.
func underRoot(root, p string) string {
	return filepath.Join(root, filepath.Clean("/"+p))
}

// parseLink parses a link spec; the serial link's port is taken under the
// root like every other guest path.
func parseLink(spec, root string) (transport.Guest, error) {
	g, err := transport.Parse(spec)
	if err != nil {
		return nil, err
	}
	if name, ok := strings.CutPrefix(spec, "serial:"); ok && filepath.Clean(root) != "/" {
		path := underRoot(root, serialmux.DevicePath(name))
		return serialmux.NewGuestOpener(func() (io.ReadWriteCloser, error) {
			return os.OpenFile(path, os.O_RDWR, 0)
		}), nil
	}
	return g, nil
}

// runOptions are the settings of "run", from its flags over the environment.
type runOptions struct {
	root, configDir, stateDir, link, bootID string
	heartbeat                               time.Duration
	perRequest, debug                       bool
}

// runFlags adds the flags of "run" to fs, their defaults taken from e.
func runFlags(fs *flag.FlagSet, e environment) *runOptions {
	o := &runOptions{}
	fs.StringVar(&o.root, "root", e.get(EnvRoot, "/"), "guest root every guest path is under (env "+EnvRoot+")")
	fs.StringVar(&o.configDir, "config-dir", e.get(EnvConfigDir, "/run/guestlink-agent"), "config directory under the root: agent.crt, agent.key, server.crt, agent.conf (env "+EnvConfigDir+")")
	fs.StringVar(&o.stateDir, "state-dir", e.get(EnvStateDir, "/run/guestlink-agent/state"), "state directory under the root (env "+EnvStateDir+")")
	fs.StringVar(&o.link, "link", e.get(EnvLink, "vsock"), "link: vsock, hybrid:<uds> or serial:<port> (env "+EnvLink+")")
	fs.DurationVar(&o.heartbeat, "heartbeat", e.duration(EnvHeartbeat, agent.DefaultHeartbeat), "heartbeat period of the ring word (env "+EnvHeartbeat+")")
	fs.BoolVar(&o.perRequest, "tls-per-request", e.boolean(EnvTLSPerRequest), "handshake TLS for every request to the daemon, no reuse (env "+EnvTLSPerRequest+")")
	fs.StringVar(&o.bootID, "boot-id", e.get(EnvBootID, ""), "id of this boot (env "+EnvBootID+"); default: <root>/proc/sys/kernel/random/boot_id, else the kernel's")
	fs.BoolVar(&o.debug, "debug", e.boolean(EnvDebug), "debug logging (env "+EnvDebug+")")
	return o
}

func runAgent(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := runFlags(fs, osEnv)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("run: unexpected arguments %q", fs.Args())
	}
	if o.heartbeat <= 0 {
		return fmt.Errorf("run: --heartbeat must be positive, got %s", o.heartbeat)
	}
	g, err := parseLink(o.link, o.root)
	if err != nil {
		return err
	}
	level := slog.LevelInfo
	if o.debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	a, err := agent.New(agent.Config{
		Root:           o.root,
		ConfigDir:      underRoot(o.root, o.configDir),
		StateDir:       underRoot(o.root, o.stateDir),
		VirtioPortsDir: underRoot(o.root, "/dev/virtio-ports"),
		DevlxdSocket:   underRoot(o.root, "/dev/lxd/sock"),
		Link:           g,
		Heartbeat:      o.heartbeat,
		PerRequestTLS:  o.perRequest,
		BootID:         o.bootID,
		Version:        version,
		Log:            log,
		// A Type=notify unit (packaging/agent) is up once /dev/lxd/sock answers.
		OnDevlxdUp: func() {
			notifyOnce.Do(func() {
				if sent, err := sdnotify.Notify(sdnotify.Ready); err != nil {
					log.Warn("telling systemd the agent is ready", "err", err)
				} else if sent {
					log.Info("told systemd the agent is ready")
				}
			})
		},
	})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return a.Run(ctx)
}

// socketFlag adds --socket, defaulting to GUESTLINK_AGENT_DEVLXD_SOCKET,
// else <GUESTLINK_AGENT_ROOT>/dev/lxd/sock (each read from e).
func socketFlag(fs *flag.FlagSet, e environment) *string {
	def := e.get(EnvDevlxdSocket, underRoot(e.get(EnvRoot, "/"), "/dev/lxd/sock"))
	return fs.String("socket", def, "devlxd socket (env "+EnvDevlxdSocket+", else <"+EnvRoot+">/dev/lxd/sock)")
}

func declare(args []string, stderr io.Writer, state string) error {
	fs := flag.NewFlagSet(state, flag.ContinueOnError)
	fs.SetOutput(stderr)
	sock := socketFlag(fs, osEnv)
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	reason := fs.String("reason", "", "why, as a CamelCase word such as ProbeFailed (guestlink extension)")
	message := fs.String("message", "", "a human explanation (guestlink extension)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%s: unexpected arguments %q", strings.ToLower(state), fs.Args())
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	put := devlxdapi.StatePut{State: state, Reason: *reason, Message: *message}
	if err := devlxdclient.DeclareWith(ctx, devlxdclient.New(*sock), put); err != nil {
		return fmt.Errorf("declaring %s: %w", state, err)
	}
	return nil
}

func waitHost(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("wait-host", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sock := socketFlag(fs, osEnv)
	timeout := fs.Duration("timeout", 60*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	return devlxdclient.WaitHost(ctx, devlxdclient.New(*sock))
}
