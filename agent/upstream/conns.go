package upstream

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/guestlink/guestlink/link/advert"
	"github.com/guestlink/guestlink/link/transport"
)

// Pool limits of the kept-alive connections to one daemon.
const (
	// maxIdle is how many idle connections are kept (each for
	// Options.IdleTimeout).
	maxIdle = 8
	// bufSize is the size of each connection's read and write buffers: a
	// devlxd request and most answers fit in one.
	bufSize = 4096
)

// daemonConns holds the kept-alive connections to one advertised daemon and
// sends requests on them, each on its caller's goroutine.
type daemonConns struct {
	adv        advert.Advertisement
	link       transport.Guest
	tls        *tls.Config
	perRequest bool
	// idleTimeout is how long an idle connection is kept
	// (Options.IdleTimeout).
	idleTimeout time.Duration

	mu     sync.Mutex
	idle   []*daemonConn // most recently used last
	closed bool
}

// daemonConn is one TLS connection to the daemon with its buffers.
type daemonConn struct {
	tc       *tls.Conn
	raw      net.Conn // the link's connection under tc (peerClosed)
	br       *bufio.Reader
	bw       *bufio.Writer
	reused   bool        // served a request before
	idleFrom time.Time   // when it went back to the pool
	expiry   *time.Timer // closes it idleTimeout after it went idle
}

// get returns an idle connection, or dials a new one. A request that took
// this daemon's pool just before SetAdvertisement replaced it still dials
// (as net/http's Transport did after CloseIdleConnections); its connection
// is closed when the request ends.
//
// An idle connection is used only if it is alive: one the daemon closed
// while it was idle (its budget of kept connections, its idle timeout, a
// restart) is closed and the next one tried, before anything is written on
// it. fresh skips the idle ones (a retry).
func (d *daemonConns) get(ctx context.Context, deadline time.Time, fresh bool) (*daemonConn, error) {
	if !d.perRequest && !fresh {
		for {
			now := time.Now()
			d.mu.Lock()
			n := len(d.idle)
			if n == 0 {
				d.mu.Unlock()
				break
			}
			pc := d.idle[n-1]
			d.idle = d.idle[:n-1]
			d.mu.Unlock()
			if now.Sub(pc.idleFrom) < d.idleTimeout && pc.alive() {
				return pc, nil
			}
			_ = pc.tc.Close()
		}
	}
	return d.dial(ctx, deadline)
}

// alive reports whether an idle connection can carry a request: nothing
// came on it since its last answer. On an idle HTTP/1.1 connection the
// daemon sends nothing but its close (TLS close_notify, then the end of the
// stream), so anything readable means it is closed or unusable. Two looks,
// neither waits: the link's socket is peeked (what arrived since the last
// read), then the TLS layer is read with a deadline already passed, which
// does not ask the socket but processes what the last answer's read already
// buffered (a close_notify that came with the answer). A link connection
// without a descriptor (a serial session) gets the second look only.
func (pc *daemonConn) alive() bool {
	if pc.br.Buffered() > 0 {
		return false
	}
	if closed, known := peerClosed(pc.raw); known && closed {
		return false
	}
	if err := pc.tc.SetReadDeadline(time.Unix(1, 0)); err != nil {
		return false
	}
	var b [1]byte
	n, err := pc.tc.Read(b[:])
	if n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	return pc.tc.SetReadDeadline(time.Time{}) == nil
}

// peerClosed peeks at c's socket without blocking: closed is true when the
// peer's end of stream or any byte is waiting, or the socket failed; known
// is false when c has no descriptor to ask.
func peerClosed(c net.Conn) (closed, known bool) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false, false
	}
	var errno syscall.Errno
	if err := rc.Read(func(fd uintptr) bool {
		// recv(2) without a source address: syscall.Recvfrom would
		// parse one, and it knows no AF_VSOCK address.
		var b [1]byte
		_, _, errno = syscall.Syscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		return true // one attempt: never wait for the socket
	}); err != nil {
		return true, true
	}
	// EAGAIN: nothing came, alive. Anything else is the end of the stream,
	// a byte (the close under way) or a failed socket.
	return errno != syscall.EAGAIN, true
}

// dial connects over the link and handshakes TLS, within DialTimeout and
// HandshakeTimeout and the request's deadline.
func (d *daemonConns) dial(ctx context.Context, deadline time.Time) (*daemonConn, error) {
	dctx, cancel := context.WithDeadline(ctx, earliest(deadline, time.Now().Add(DialTimeout)))
	raw, err := d.link.Dial(dctx, d.adv.CID, d.adv.Port)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("dialing daemon: %w", err)
	}
	tc := tls.Client(raw, d.tls)
	hctx, cancel := context.WithDeadline(ctx, earliest(deadline, time.Now().Add(HandshakeTimeout)))
	err = tc.HandshakeContext(hctx)
	cancel()
	if err != nil {
		_ = raw.Close()
		if shed(err) {
			return nil, fmt.Errorf("TLS handshake with daemon: %w: %w", ErrShed, err)
		}
		return nil, fmt.Errorf("TLS handshake with daemon: %w", err)
	}
	return &daemonConn{tc: tc, raw: raw, br: bufio.NewReaderSize(tc, bufSize), bw: bufio.NewWriterSize(tc, bufSize)}, nil
}

// put returns a connection whose answer was read to the end to the pool.
func (d *daemonConns) put(pc *daemonConn) {
	if d.perRequest {
		_ = pc.tc.Close()
		return
	}
	pc.reused = true
	pc.idleFrom = time.Now()
	d.mu.Lock()
	if d.closed || len(d.idle) >= maxIdle {
		d.mu.Unlock()
		_ = pc.tc.Close()
		return
	}
	d.idle = append(d.idle, pc)
	if pc.expiry == nil {
		pc.expiry = time.AfterFunc(d.idleTimeout, func() { d.expire(pc) })
	} else {
		pc.expiry.Reset(d.idleTimeout)
	}
	d.mu.Unlock()
}

// expire closes pc if it is still idle: an idle guest holds no connection
// to the daemon past Options.IdleTimeout.
func (d *daemonConns) expire(pc *daemonConn) {
	d.mu.Lock()
	i := slices.Index(d.idle, pc)
	if i < 0 {
		d.mu.Unlock()
		return // taken again, or closed with the pool
	}
	d.idle = slices.Delete(d.idle, i, i+1)
	d.mu.Unlock()
	_ = pc.tc.Close()
}

// closeIdle closes the idle connections.
func (d *daemonConns) closeIdle() {
	d.mu.Lock()
	idle := d.idle
	d.idle = nil
	d.mu.Unlock()
	for _, pc := range idle {
		if pc.expiry != nil {
			pc.expiry.Stop()
		}
		_ = pc.tc.Close()
	}
}

// close closes the idle connections; those in use are closed when their
// request ends.
func (d *daemonConns) close() {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.closeIdle()
}

// roundTrip sends one request and returns the answer, whose body the caller
// reads and closes. A kept-alive connection found closed before the request
// is written on it is not used (get). One that turns out to be dead (the
// daemon closed it as the request crossed it) before any answer arrived is
// replaced by a new connection once, for requests that cannot have been
// acted on twice, or whose second effect is the first's (replayable): the
// write failed, the method is GET or HEAD, or it is the guest's state
// declaration. Any other PATCH or PUT written on it is not replayed: the
// daemon may have acted on it.
func (d *daemonConns) roundTrip(ctx context.Context, method, path string, body []byte, h Header) (*http.Response, error) {
	deadline := time.Now().Add(RequestTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	for retry := false; ; retry = true {
		pc, err := d.get(ctx, deadline, retry)
		if err != nil {
			return nil, err
		}
		resp, wrote, err := d.send(ctx, pc, deadline, method, path, body, h)
		if err == nil {
			return resp, nil
		}
		_ = pc.tc.Close()
		if retry || !pc.reused || ctx.Err() != nil || (wrote && !replayable(method, path)) {
			return nil, err
		}
	}
}

// replayable reports whether a request the daemon may have acted on can be
// sent again with the same effect: GET and HEAD, and PATCH /1.0, the
// guest's state declaration, which sets the state its body names (a
// declaration the daemon had already taken is a repeat, which devlxd
// answers and announces as any repeat: docs/instance-service.md). So a Ready
// declaration crossing the daemon's close of an idle kept connection is
// not lost.
func replayable(method, path string) bool {
	switch method {
	case http.MethodGet, http.MethodHead:
		return true
	case http.MethodPatch:
		return path == "/1.0"
	}
	return false
}

// send writes the request on pc and reads the answer's head. wrote reports
// whether the request was written out.
func (d *daemonConns) send(ctx context.Context, pc *daemonConn, deadline time.Time, method, path string, body []byte, h Header) (resp *http.Response, wrote bool, err error) {
	if err := pc.tc.SetDeadline(deadline); err != nil {
		return nil, false, fmt.Errorf("setting deadline: %w", err)
	}
	// The caller's cancellation ends a blocked read or write at once.
	stop := context.AfterFunc(ctx, func() { _ = pc.tc.SetDeadline(time.Unix(1, 0)) })
	fail := func(err error) (*http.Response, bool, error) {
		stop()
		if cerr := ctx.Err(); cerr != nil {
			err = fmt.Errorf("%w (%w)", cerr, err)
		} else if errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(deadline) {
			// RequestTimeout ran out: reported as the context timeout
			// it used to be (devlxdproxy does not retry after one).
			err = fmt.Errorf("%w (%w)", context.DeadlineExceeded, err)
		}
		return nil, wrote, err
	}
	writeHead(pc.bw, method, path, body, h, d.perRequest)
	_, _ = pc.bw.Write(body)
	if err := pc.bw.Flush(); err != nil {
		// The daemon may have answered before reading the whole request
		// and hung up (413 for a body over its limit): that answer, if
		// it came, is the request's (as net/http's Transport does), not
		// a broken pipe.
		if !pc.reused || len(body) > 0 {
			if early, rerr := http.ReadResponse(pc.br, &http.Request{Method: method}); rerr == nil {
				early.Body = &answerBody{body: early.Body, pc: pc, d: d, stop: stop, keep: false, eof: early.Body == http.NoBody}
				return early, true, nil
			}
		}
		return fail(fmt.Errorf("writing request: %w", err))
	}
	wrote = true
	resp, err = http.ReadResponse(pc.br, &http.Request{Method: method})
	if err != nil {
		return fail(fmt.Errorf("reading answer: %w", err))
	}
	keep := !d.perRequest && !resp.Close
	// An empty body (HEAD, 204, Content-Length: 0) is at its end already.
	eof := resp.Body == http.NoBody
	resp.Body = &answerBody{body: resp.Body, pc: pc, d: d, stop: stop, keep: keep, eof: eof}
	return resp, true, nil
}

// writeHead writes the request line and headers as net/http's client wrote
// them (Host, User-Agent, Content-Length, Authorization, Content-Type,
// If-Match).
func writeHead(w *bufio.Writer, method, path string, body []byte, h Header, closeConn bool) {
	w.WriteString(method)
	w.WriteByte(' ')
	w.WriteString(path)
	w.WriteString(" HTTP/1.1\r\nHost: guestlink\r\nUser-Agent: Go-http-client/1.1\r\n")
	if closeConn {
		w.WriteString("Connection: close\r\n")
	}
	if body != nil {
		w.WriteString("Content-Length: ")
		w.WriteString(strconv.Itoa(len(body)))
		w.WriteString("\r\n")
	}
	if h.Authorization != "" {
		w.WriteString("Authorization: ")
		w.WriteString(h.Authorization)
		w.WriteString("\r\n")
	}
	if body != nil {
		w.WriteString("Content-Type: application/json\r\n")
	}
	if h.IfMatch != "" {
		w.WriteString("If-Match: ")
		w.WriteString(h.IfMatch)
		w.WriteString("\r\n")
	}
	w.WriteString("\r\n")
}

// checkRequest refuses what cannot be sent as an HTTP/1.1 request line or
// header: an empty method or path, and any control character, space or
// non-ASCII byte where it could end or split a line.
func checkRequest(method, path string, h Header) error {
	if method == "" || path == "" || path[0] != '/' {
		return fmt.Errorf("malformed request %q %q", method, path)
	}
	for i := 0; i < len(method); i++ {
		if c := method[i]; c <= ' ' || c >= 0x7f {
			return fmt.Errorf("invalid method %q", method)
		}
	}
	for i := 0; i < len(path); i++ {
		if c := path[i]; c <= ' ' || c >= 0x7f {
			return fmt.Errorf("invalid character in path %q", path)
		}
	}
	for _, f := range []struct{ name, v string }{{"Authorization", h.Authorization}, {"If-Match", h.IfMatch}} {
		for i := 0; i < len(f.v); i++ {
			if c := f.v[i]; (c < ' ' && c != '\t') || c == 0x7f {
				return fmt.Errorf("invalid character in the %s header", f.name)
			}
		}
	}
	return nil
}

// answerBody is the body of an answer: when it has been read to the end and
// is closed, its connection goes back to the pool; closed early, the
// connection is closed.
type answerBody struct {
	body io.ReadCloser
	pc   *daemonConn
	d    *daemonConns
	stop func() bool
	keep bool

	eof  bool
	done bool
}

func (b *answerBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, http.ErrBodyReadAfterClose
	}
	n, err := b.body.Read(p)
	if errors.Is(err, io.EOF) {
		b.eof = true
	}
	return n, err
}

// Close releases the connection.
func (b *answerBody) Close() error {
	if b.done {
		return nil
	}
	b.done = true
	// Once stop reports false the caller's cancellation fired and the
	// connection's deadline is in the past: it cannot be reused. A body
	// closed before its end is not drained (net/http's would be, blocking
	// on a stream): its connection is closed.
	if b.stop() && b.eof && b.keep {
		_ = b.body.Close()
		b.d.put(b.pc)
		return nil
	}
	return b.pc.tc.Close()
}

// earliest returns the earlier of a and b.
func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// shed reports whether a TLS handshake error is the daemon closing the
// connection before answering (end of stream, reset, broken pipe) rather
// than a TLS refusal (an alert: a certificate it does not accept) or a
// timeout.
func shed(err error) bool {
	var alert tls.AlertError
	if errors.As(err, &alert) {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
