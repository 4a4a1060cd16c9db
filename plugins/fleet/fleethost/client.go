package fleethost

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/guestlink/guestlink/plugins/sdk"
	backendv1 "github.com/guestlink/guestlink/plugins/sdk/proto/backend/v1"
)

// Connect returns a Backend that forwards every call to the fleet host of
// dataDir, starting the host (exe host <dataDir>, in a session of its own)
// when none answers. Close the returned closer when done.
func Connect(ctx context.Context, dataDir, exe string) (sdk.Backend, io.Closer, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("fleet data dir: %w", err)
	}
	sock := filepath.Join(dataDir, SocketName)
	if l := len(sock); l > sdk.MaxSocketPath {
		return nil, nil, fmt.Errorf("fleet host socket %s is %d bytes, over the limit of %d; use a shorter %s", sock, l, sdk.MaxSocketPath, sdk.DataDirEnv)
	}
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		if alive(ctx, sock) {
			cc, err := grpc.NewClient("unix:"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
				// The open connection keeps the host up: never let it idle.
				grpc.WithIdleTimeout(0))
			if err != nil {
				return nil, nil, fmt.Errorf("connecting to the fleet host: %w", err)
			}
			cc.Connect()
			return sdk.NewGRPCBackend(backendv1.NewBackendClient(cc)), cc, nil
		}
		if last = launch(ctx, dataDir, exe); last != nil && ctx.Err() != nil {
			break
		}
	}
	return nil, nil, fmt.Errorf("starting the fleet host: %w", last)
}

func alive(ctx context.Context, sock string) bool {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// launch starts a host and waits until it listens (it closes the ready
// pipe) or fails (it writes why first). A host that lost the lock to
// another one just started is not an error: the caller dials again.
func launch(ctx context.Context, dataDir, exe string) error {
	logf, err := os.OpenFile(filepath.Join(dataDir, LogName), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("opening host log: %w", err)
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("making ready pipe: %w", err)
	}
	defer r.Close()
	cmd := exec.Command(exe, Subcommand, dataDir)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.ExtraFiles = []*os.File{w}
	cmd.Env = hostEnv(os.Environ())
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return fmt.Errorf("starting %s %s: %w", exe, Subcommand, err)
	}
	w.Close()
	go func() { _ = cmd.Wait() }() // reaps it should it end while we live
	res := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n')
		res <- strings.TrimSpace(line)
	}()
	select {
	case msg := <-res:
		if msg != "" {
			return errors.New(msg)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the fleet host: %w", ctx.Err())
	case <-time.After(time.Minute):
		return errors.New("the fleet host did not listen within a minute")
	}
}

// hostEnv is the plugin's environment without go-plugin's variables.
func hostEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if k == sdk.Handshake.MagicCookieKey || strings.HasPrefix(k, "PLUGIN_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}
