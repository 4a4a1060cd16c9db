package simvm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

var errEOF = io.EOF

// Launch starts a VMM for the guest directory p by running exe with the vmm
// subcommand in a session of its own (so it outlives the caller), with env
// as its environment, its output appended to vmm.log. It returns the VMM's
// pid once the VMM listens on its control socket; the guest waits for
// CmdCont. The caller's process reaps the VMM when it exits.
func Launch(ctx context.Context, exe string, p Paths, env []string) (int, error) {
	logf, err := os.OpenFile(p.VMMLog(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return 0, fmt.Errorf("launching vmm: %w", err)
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return 0, fmt.Errorf("launching vmm: %w", err)
	}
	defer r.Close()
	cmd := exec.Command(exe, Subcommand, p.Dir)
	cmd.Dir = p.Dir
	cmd.Env = append(env[:len(env):len(env)], fmt.Sprintf("%s=%d", ReadyEnv, readyFD))
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.ExtraFiles = []*os.File{w} // fd 3
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return 0, fmt.Errorf("launching vmm %s: %w", exe, err)
	}
	w.Close()
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	if dl, ok := ctx.Deadline(); ok {
		r.SetReadDeadline(dl)
	} else {
		r.SetReadDeadline(time.Now().Add(DefaultTimeout))
	}
	stop := context.AfterFunc(ctx, func() { r.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	msg, rerr := io.ReadAll(io.LimitReader(r, 64<<10))
	line := strings.TrimSpace(string(msg))
	switch {
	case line == readyOK:
		return cmd.Process.Pid, nil
	case strings.HasPrefix(line, readyErrorPrefix):
		<-exited
		return 0, fmt.Errorf("vmm failed to start: %s", strings.TrimPrefix(line, readyErrorPrefix))
	}
	_ = cmd.Process.Kill()
	<-exited
	if rerr != nil && !errors.Is(rerr, io.EOF) {
		if ctx.Err() != nil {
			rerr = ctx.Err()
		}
		return 0, fmt.Errorf("waiting for vmm to start: %w", rerr)
	}
	return 0, fmt.Errorf("vmm exited during start-up: %s", logTail(p.VMMLog()))
}

// logTail returns the last lines of a log file, for error messages.
func logTail(name string) string {
	data, err := os.ReadFile(name)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	data = bytes.TrimSpace(data)
	if len(data) > 512 {
		data = data[len(data)-512:]
	}
	if len(data) == 0 {
		return "(empty log)"
	}
	return string(data)
}

// WaitUnlocked waits until no VMM holds the lock of guest directory p: a
// VMM closes its control socket a moment before its process ends.
func WaitUnlocked(ctx context.Context, p Paths) error {
	f, err := os.OpenFile(p.Lock(), os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil // no VMM ever ran here
	}
	if err != nil {
		return fmt.Errorf("opening vmm lock: %w", err)
	}
	defer f.Close()
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("checking vmm lock: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the vmm to end: %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}
