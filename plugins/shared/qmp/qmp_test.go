package qmp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/guestlink/guestlink/internal/testenv"
	"github.com/guestlink/guestlink/internal/testproc"
	"github.com/guestlink/guestlink/internal/testwait"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeQEMU is a scripted QMP server on one end of a net.Pipe.
type fakeQEMU struct {
	conn net.Conn
	r    *bufio.Reader
}

func newFake(t *testing.T) (*fakeQEMU, net.Conn) {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return &fakeQEMU{conn: a, r: bufio.NewReader(a)}, b
}

func (f *fakeQEMU) send(t *testing.T, s string) {
	t.Helper()
	if _, err := f.conn.Write([]byte(s + "\r\n")); err != nil {
		t.Errorf("fake qemu write: %v", err)
	}
}

type request struct {
	Execute   string          `json:"execute"`
	Arguments json.RawMessage `json:"arguments"`
	ID        string          `json:"id"`
}

func (f *fakeQEMU) recv(t *testing.T) request {
	t.Helper()
	line, err := f.r.ReadBytes('\n')
	if err != nil {
		t.Fatalf("fake qemu read: %v", err)
	}
	var r request
	if err := json.Unmarshal(line, &r); err != nil {
		t.Fatalf("fake qemu: bad request %q: %v", line, err)
	}
	return r
}

const greeting = `{"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7}, "package": "Debian"}, "capabilities": ["oob"]}}`

// handshake runs the fake side of the handshake and returns the client.
func handshake(t *testing.T) (*fakeQEMU, *Client) {
	t.Helper()
	f, conn := newFake(t)
	type res struct {
		c   *Client
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := New(context.Background(), conn)
		ch <- res{c, err}
	}()
	f.send(t, greeting)
	r := f.recv(t)
	if r.Execute != "qmp_capabilities" {
		t.Fatalf("first command = %q, want qmp_capabilities", r.Execute)
	}
	f.send(t, fmt.Sprintf(`{"return": {}, "id": %q}`, r.ID))
	got := <-ch
	if got.err != nil {
		t.Fatalf("New: %v", got.err)
	}
	t.Cleanup(func() { got.c.Close() })
	return f, got.c
}

func TestHandshake(t *testing.T) {
	_, c := handshake(t)
	if got := c.Greeting().Version.String(); got != "7.2.0" {
		t.Errorf("version = %q, want 7.2.0", got)
	}
}

func TestHandshakeErrors(t *testing.T) {
	tests := []struct {
		name  string
		first string
		want  error
	}{
		{"not json", "hello", ErrProtocol},
		{"not a greeting", `{"return": {}}`, ErrProtocol},
		{"closed", "", ErrClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, conn := newFake(t)
			go func() {
				if tt.first == "" {
					f.conn.Close()
					return
				}
				f.conn.Write([]byte(tt.first + "\n"))
			}()
			_, err := New(context.Background(), conn)
			if !errors.Is(err, tt.want) {
				t.Fatalf("New error = %v, want %v", err, tt.want)
			}
		})
	}
	t.Run("refused capabilities", func(t *testing.T) {
		f, conn := newFake(t)
		go func() {
			f.send(t, greeting)
			r := f.recv(t)
			f.send(t, fmt.Sprintf(`{"error": {"class": "CommandNotFound", "desc": "nope"}, "id": %q}`, r.ID))
		}()
		_, err := New(context.Background(), conn)
		var qe *Error
		if !errors.As(err, &qe) || qe.Class != "CommandNotFound" || qe.Command != "qmp_capabilities" {
			t.Fatalf("New error = %v, want CommandNotFound from qmp_capabilities", err)
		}
	})
	t.Run("silent server honours ctx", func(t *testing.T) {
		_, conn := newFake(t)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := New(ctx, conn)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("New error = %v, want deadline exceeded", err)
		}
	})
}

func TestConcurrentCallsMatchedByID(t *testing.T) {
	f, c := handshake(t)
	const n = 8
	var wg sync.WaitGroup
	results := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out struct {
				Echo string `json:"echo"`
			}
			errs[i] = c.Execute(context.Background(), "echo", map[string]string{"v": fmt.Sprint(i)}, &out)
			results[i] = out.Echo
		}()
	}
	reqs := make([]request, n)
	for i := range n {
		reqs[i] = f.recv(t)
	}
	// Answer in reverse order, with an event and a stray answer in between.
	f.send(t, `{"event": "RESET", "data": {"guest": true}, "timestamp": {"seconds": 1700000000, "microseconds": 5}}`)
	f.send(t, `{"return": {}, "id": "not-ours"}`)
	for i := n - 1; i >= 0; i-- {
		var a struct{ V string }
		json.Unmarshal(reqs[i].Arguments, &a)
		f.send(t, fmt.Sprintf(`{"return": {"echo": %q}, "id": %q}`, a.V, reqs[i].ID))
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || results[i] != fmt.Sprint(i) {
			t.Errorf("call %d = %q, %v; want %q", i, results[i], errs[i], fmt.Sprint(i))
		}
	}
	select {
	case ev := <-c.Events():
		if ev.Name != "RESET" || ev.Time.Unix() != 1700000000 || string(ev.Data) != `{"guest": true}` {
			t.Errorf("event = %+v", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
	}
}

func TestErrorAnswer(t *testing.T) {
	f, c := handshake(t)
	go func() {
		r := f.recv(t)
		f.send(t, fmt.Sprintf(`{"error": {"class": "DeviceNotFound", "desc": "Device 'x' not found"}, "id": %q}`, r.ID))
	}()
	err := c.Execute(context.Background(), "ringbuf-read", map[string]any{"device": "x"}, nil)
	var qe *Error
	if !errors.As(err, &qe) {
		t.Fatalf("error = %v, want *Error", err)
	}
	if qe.Class != "DeviceNotFound" || qe.Desc != "Device 'x' not found" || qe.Command != "ringbuf-read" {
		t.Errorf("error = %+v", qe)
	}
}

func TestCloseMidCommand(t *testing.T) {
	f, c := handshake(t)
	const n = 4
	errs := make(chan error, n)
	for range n {
		go func() { errs <- c.Execute(context.Background(), "migrate", nil, nil) }()
	}
	for range n {
		f.recv(t)
	}
	f.send(t, `{"event": "SHUTDOWN", "data": {"guest": false, "reason": "host-qmp-quit"}, "timestamp": {"seconds": 1, "microseconds": 0}}`)
	f.conn.Close()
	for range n {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrClosed) {
				t.Errorf("pending call error = %v, want ErrClosed", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("pending call did not fail after close")
		}
	}
	<-c.Done()
	if err := c.Execute(context.Background(), "query-status", nil, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("call after close = %v, want ErrClosed", err)
	}
	// The event queued before the close is still delivered, then the channel closes.
	var names []string
	for ev := range c.Events() {
		names = append(names, ev.Name)
	}
	if len(names) != 1 || names[0] != "SHUTDOWN" {
		t.Errorf("events = %v, want [SHUTDOWN]", names)
	}
}

func TestCancelledCall(t *testing.T) {
	f, c := handshake(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Execute(ctx, "slow", nil, nil) }()
	r := f.recv(t)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("error = %v, want canceled", err)
	}
	// The late answer is dropped and the client keeps working.
	f.send(t, fmt.Sprintf(`{"return": {}, "id": %q}`, r.ID))
	go func() {
		r := f.recv(t)
		f.send(t, fmt.Sprintf(`{"return": {"status": "running"}, "id": %q}`, r.ID))
	}()
	var st struct{ Status string }
	if err := c.Execute(context.Background(), "query-status", nil, &st); err != nil || st.Status != "running" {
		t.Fatalf("query-status = %+v, %v", st, err)
	}
}

// startQEMU starts a guestless QEMU with a QMP socket and returns the socket path.
func startQEMU(t testing.TB) (string, *exec.Cmd) {
	t.Helper()
	bin, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		testenv.Requires(t, "qemu-system-x86_64", "not installed (scripts/install-deps.sh installs qemu-system-x86)")
	}
	sock := filepath.Join(t.TempDir(), "qmp.sock")
	cmd := exec.Command(bin, "-machine", "none", "-nodefaults", "-display", "none",
		"-qmp", "unix:"+sock+",server=on,wait=off")
	cmd.Stderr = os.Stderr
	testproc.Start(t, cmd) // its own process group, killed when the test ends
	// The socket file appears at bind, a moment before QEMU listens on it:
	// wait until a connection is accepted. QEMU serves one QMP client at a
	// time and takes the next once this probe closes.
	testwait.For(t, "qemu to listen on its qmp socket", 30*time.Second, func() bool {
		conn, err := net.Dial("unix", sock)
		if err != nil {
			return false
		}
		conn.Close()
		return true
	})
	return sock, cmd
}

func TestRealQEMU(t *testing.T) {
	sock, cmd := startQEMU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := Dial(ctx, sock)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.Close()
	if c.Greeting().Version.Qemu.Major < 7 {
		t.Errorf("greeting = %+v", c.Greeting())
	}
	var st struct {
		Status  string `json:"status"`
		Running bool   `json:"running"`
	}
	if err := c.Execute(ctx, "query-status", nil, &st); err != nil {
		t.Fatalf("query-status: %v", err)
	}
	if st.Status == "" {
		t.Errorf("query-status = %+v", st)
	}
	err = c.Execute(ctx, "ringbuf-read", map[string]any{"device": "nope", "size": 16}, nil)
	var qe *Error
	if !errors.As(err, &qe) || qe.Class == "" || qe.Desc == "" {
		t.Errorf("ringbuf-read on a missing device = %v, want a QEMU error", err)
	}
	// quit: QEMU answers, emits SHUTDOWN and closes the socket.
	if err := c.Execute(ctx, "quit", nil, nil); err != nil && !errors.Is(err, ErrClosed) {
		t.Fatalf("quit: %v", err)
	}
	var names []string
	for ev := range c.Events() {
		names = append(names, ev.Name)
	}
	if len(names) == 0 || names[len(names)-1] != "SHUTDOWN" {
		t.Errorf("events after quit = %v, want SHUTDOWN last", names)
	}
	if err := c.Execute(ctx, "query-status", nil, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("call after quit = %v, want ErrClosed", err)
	}
	cmd.Wait()
}

func TestRealQEMUKilledMidCommand(t *testing.T) {
	sock, cmd := startQEMU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := Dial(ctx, sock)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.Close()
	// Keep calls in flight while QEMU is killed: each must end, none may hang.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := c.Execute(ctx, "query-status", nil, nil); err != nil {
					if !errors.Is(err, ErrClosed) {
						t.Errorf("error = %v, want ErrClosed", err)
					}
					return
				}
			}
		}()
	}
	cmd.Process.Kill()
	select {
	case <-c.Done():
	case <-ctx.Done():
		t.Fatal("client did not notice QEMU's death")
	}
	close(stop)
	wg.Wait()
}

func BenchmarkRealQEMUQueryStatus(b *testing.B) {
	sock, _ := startQEMU(b)
	ctx := context.Background()
	c, err := Dial(ctx, sock)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.ResetTimer()
	for b.Loop() {
		if err := c.Execute(ctx, "query-status", nil, nil); err != nil {
			b.Fatal(err)
		}
	}
}
