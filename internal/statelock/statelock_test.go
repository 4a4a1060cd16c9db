package statelock_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/internal/statelock"
	"github.com/guestlink/guestlink/internal/testproc"
)

// holderEnv makes the test binary a lock holder (see TestMain): it locks
// the directory the variable names, starts a child of its own (which must
// not inherit the lock), prints "locked CHILDPID" and waits to be killed.
const holderEnv = "STATELOCK_TEST_HOLD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(holderEnv); dir != "" {
		hold(dir)
		return
	}
	os.Exit(m.Run())
}

func hold(dir string) {
	if _, err := statelock.Acquire(dir); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	child := exec.Command("sleep", "3600")
	if err := child.Start(); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("locked", child.Process.Pid)
	// Until SIGKILL. Not select {}: with no other goroutine the runtime
	// calls that a deadlock and exits, dropping the lock while the test
	// still expects it held (CI saw it under load).
	for {
		time.Sleep(time.Hour)
	}
}

func readFile(t *testing.T, path string) (string, os.FileMode) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data), fi.Mode().Perm()
}

// TestAcquire: the first Acquire wins and writes its PID into a 0600
// file; a second one (another descriptor of the same process, which flock
// treats like another process) is refused naming that PID and changes
// nothing; after Release the directory can be locked again.
func TestAcquire(t *testing.T) {
	dir := t.TempDir()
	l, err := statelock.Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, statelock.FileName)
	if l.Path() != path {
		t.Errorf("Path() = %q, want %q", l.Path(), path)
	}
	content, mode := readFile(t, path)
	if want := strconv.Itoa(os.Getpid()) + "\n"; content != want || mode != 0o600 {
		t.Errorf("lock file holds %q mode %04o; want %q mode 0600", content, mode, want)
	}

	_, err = statelock.Acquire(dir)
	var held *statelock.HeldError
	if !errors.As(err, &held) || !errors.Is(err, statelock.ErrHeld) {
		t.Fatalf("second Acquire: %v; want a *HeldError", err)
	}
	if held.PID != os.Getpid() || held.Dir != dir {
		t.Errorf("HeldError = %+v; want PID %d, Dir %s", held, os.Getpid(), dir)
	}
	if msg := err.Error(); !strings.Contains(msg, "PID "+strconv.Itoa(os.Getpid())) || !strings.Contains(msg, dir) {
		t.Errorf("refusal %q does not name the holder's PID and the directory", msg)
	}
	if after, _ := readFile(t, path); after != content {
		t.Errorf("a refused Acquire changed the lock file: %q, was %q", after, content)
	}

	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); err != nil {
		t.Errorf("a second Release: %v", err)
	}
	if after, _ := readFile(t, path); after != "" {
		t.Errorf("released lock file holds %q; want it empty", after)
	}
	l2, err := statelock.Acquire(dir)
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	l2.Release()
}

// TestAcquireOldFile: a lock file left with another mode and a longer
// content is made 0600 and holds exactly this PID.
func TestAcquireOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, statelock.FileName)
	if err := os.WriteFile(path, []byte("1234567890123\nleft over\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}
	l, err := statelock.Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	content, mode := readFile(t, path)
	if want := strconv.Itoa(os.Getpid()) + "\n"; content != want || mode != 0o600 {
		t.Errorf("lock file holds %q mode %04o; want %q mode 0600", content, mode, want)
	}
}

// TestAcquireRefusesOddFiles: a symlink (even to a file the user owns), a
// directory or a FIFO at the lock path is refused, promptly, and the
// symlink's target is left as it was.
func TestAcquireRefusesOddFiles(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(t *testing.T, path string)
	}{
		{"symlink", func(t *testing.T, path string) {
			target := filepath.Join(t.TempDir(), "target")
			if err := os.WriteFile(target, []byte("keep"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if data, _ := os.ReadFile(target); string(data) != "keep" {
					t.Errorf("the symlink's target now holds %q", data)
				}
			})
		}},
		{"directory", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}},
		{"fifo", func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.make(t, filepath.Join(dir, statelock.FileName))
			l, err := statelock.Acquire(dir)
			if err == nil {
				l.Release()
				t.Fatal("Acquire succeeded; want a refusal")
			}
			if errors.Is(err, statelock.ErrHeld) {
				t.Errorf("Acquire: %v; want an error other than ErrHeld", err)
			}
		})
	}
	if _, err := statelock.Acquire(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("Acquire on a missing directory succeeded")
	}
}

// TestKilledHolderLeavesNoLock: another process holds the lock (refused,
// naming its PID), then is killed with SIGKILL while a child it started
// lives on; the directory can be locked at once, as the kernel dropped the
// lock and the child never inherited it.
func TestKilledHolderLeavesNoLock(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	testproc.Start(t, cmd) // the group, the sleep included, is killed at the end
	line, err := bufio.NewReader(out).ReadString('\n')
	var childPID int
	if _, serr := fmt.Sscanf(line, "locked %d", &childPID); err != nil || serr != nil {
		t.Fatalf("the holder said %q (%v); want \"locked PID\"", line, err)
	}

	_, err = statelock.Acquire(dir)
	var held *statelock.HeldError
	if !errors.As(err, &held) || held.PID != cmd.Process.Pid {
		t.Fatalf("Acquire while another process holds the lock: %v; want a HeldError naming PID %d", err, cmd.Process.Pid)
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if err := syscall.Kill(childPID, 0); err != nil {
		t.Fatalf("the holder's child %d is gone (%v); the test needs it alive", childPID, err)
	}
	l, err := statelock.Acquire(dir)
	if err != nil {
		t.Fatalf("Acquire after the holder was killed: %v", err)
	}
	l.Release()
}
