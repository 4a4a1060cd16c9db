package sdk

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
)

// DefaultStartTimeout is how long Launch waits for a plugin's handshake when
// LaunchOptions.StartTimeout is zero.
const DefaultStartTimeout = 10 * time.Second

// LaunchOptions configures Launch.
type LaunchOptions struct {
	// Logger receives the plugin's log lines (with their levels) and
	// go-plugin's own messages. Nil discards them.
	Logger hclog.Logger
	// StartTimeout bounds the wait for the plugin's handshake; zero means
	// DefaultStartTimeout. A ctx deadline that comes sooner wins.
	StartTimeout time.Duration
	// Checksum is the expected SHA-256 of the binary. When set, a binary
	// whose content differs is not started (ErrChecksum).
	Checksum []byte
	// Args are extra command-line arguments for the plugin.
	Args []string
	// Env are extra environment variables ("KEY=value") on top of the
	// daemon's own environment.
	Env []string
}

// ErrChecksum reports that a plugin binary does not match its expected
// SHA-256 checksum.
var ErrChecksum = errors.New("plugin checksum mismatch")

// Client is one running plugin process. A Client is single-use: once the
// process exited or was killed, Launch a new one.
type Client struct {
	pc      *plugin.Client
	backend Backend
	pid     int
	tail    *stderrTail
	done    chan struct{}
	stop    chan struct{}
	once    sync.Once
}

// Launch starts the plugin binary at path as a child process, performs the
// go-plugin handshake (gRPC only, automatic mutual TLS) and returns a Client
// whose Backend calls it. On any failure the process is killed and the error
// says why: ErrChecksum, a handshake failure (for instance a plugin that
// wrote something other than the handshake to stdout), a timeout, or a
// plugin that exited during start-up.
func Launch(ctx context.Context, path string, opts LaunchOptions) (*Client, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("launching plugin %q: %w", path, err)
	}
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	timeout := opts.StartTimeout
	if timeout <= 0 {
		timeout = DefaultStartTimeout
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	cmd := exec.Command(path, opts.Args...)
	cmd.Env = append(cmd.Env, opts.Env...)
	cmd.Env = append(cmd.Env, LogLevelEnv+"="+log.GetLevel().String())
	cfg := &plugin.ClientConfig{
		HandshakeConfig:  Handshake,
		Plugins:          PluginSet(nil),
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		StartTimeout:     timeout,
		Logger:           log,
		GRPCDialOptions:  windowDialOptions(),
	}
	if len(opts.Checksum) > 0 {
		cfg.SecureConfig = &plugin.SecureConfig{Checksum: opts.Checksum, Hash: sha256.New()}
	}
	tail := &stderrTail{}
	cfg.Stderr = tail
	pc := plugin.NewClient(cfg)
	fail := func(what string, err error) (*Client, error) {
		pc.Kill()
		if s := tail.String(); s != "" {
			return nil, fmt.Errorf("%s plugin %q: %w (plugin stderr: %s)", what, path, err, s)
		}
		return nil, fmt.Errorf("%s plugin %q: %w", what, path, err)
	}
	if _, err := pc.Start(); err != nil {
		if errors.Is(err, plugin.ErrChecksumsDoNotMatch) {
			return fail("starting", ErrChecksum)
		}
		// Kill returns once go-plugin waited for the process and read
		// all its stderr: cmd.ProcessState and the tail are complete.
		pc.Kill()
		return nil, fmt.Errorf("starting plugin %q: %w", path, &startError{msg: startFailure(path, cmd, err, tail.String()), err: err})
	}
	proto, err := pc.Client()
	if err != nil {
		return fail("connecting to", err)
	}
	raw, err := proto.Dispense(PluginName)
	if err != nil {
		return fail("dispensing", err)
	}
	b, ok := raw.(Backend)
	if !ok {
		return fail("dispensing", fmt.Errorf("unexpected plugin type %T", raw))
	}
	c := &Client{pc: pc, backend: b, tail: tail, done: make(chan struct{}), stop: make(chan struct{})}
	if rc := pc.ReattachConfig(); rc != nil {
		c.pid = rc.Pid
	}
	go c.watch()
	return c, nil
}

// watch closes done once the plugin process exited. It waits on the
// process's pidfd (processExit), then for go-plugin to have seen the exit
// too, so Exited holds when done is closed; where there is no pidfd it
// polls every 50 ms (an idle daemon woke 20 times a second per plugin so).
func (c *Client) watch() {
	if c.pid > 0 {
		if exited, stop, err := processExit(c.pid); err == nil {
			defer stop()
			select {
			case <-exited:
			case <-c.stop:
				close(c.done)
				return
			}
		}
	}
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if c.pc.Exited() {
			close(c.done)
			return
		}
		select {
		case <-t.C:
		case <-c.stop:
			close(c.done)
			return
		}
	}
}

// Backend returns the Backend that calls this plugin process. Its calls fail
// with ErrUnavailable once the process is gone.
func (c *Client) Backend() Backend { return c.backend }

// PID returns the plugin process's id.
func (c *Client) PID() int { return c.pid }

// Exited reports whether the plugin process has ended.
func (c *Client) Exited() bool { return c.pc.Exited() }

// Done returns a channel closed once the plugin process has ended or Kill
// returned.
func (c *Client) Done() <-chan struct{} { return c.done }

// Stderr returns the last lines the plugin wrote to stderr (joined by
// " | "), to say why a plugin died.
func (c *Client) Stderr() string { return c.tail.String() }

// startError is a go-plugin start-up error shortened for people; Unwrap
// keeps the original.
type startError struct {
	msg string
	err error
}

func (e *startError) Error() string { return e.msg }
func (e *startError) Unwrap() error { return e.err }

// killGrace is how long Kill waits for go-plugin's own shutdown before it
// kills the process itself: go-plugin's graceful close waits for an answer
// from the plugin without a deadline, which a frozen process never gives.
const killGrace = 5 * time.Second

// Kill asks the plugin to exit, kills it if it does not within a few
// seconds (also when it is frozen), and returns once it is gone. It is safe
// to call more than once and concurrently.
func (c *Client) Kill() {
	c.once.Do(func() {
		killed := make(chan struct{})
		go func() {
			c.pc.Kill()
			close(killed)
		}()
		select {
		case <-killed:
		case <-time.After(killGrace):
			if c.pid > 0 {
				_ = syscall.Kill(c.pid, syscall.SIGKILL)
			}
			<-killed
		}
		close(c.stop)
	})
	<-c.done
}
