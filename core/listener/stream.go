package listener

import (
	"bufio"
	"net"
	"time"
)

// StreamWriter returns a writer for a streaming response on c (fasthttp's
// SetBodyStreamWriter hands the stream w): each time it flushes, it first
// extends c's write deadline by timeout and then flushes w, so a stream
// lives as long as its client keeps reading, whatever the server's
// WriteTimeout, and a client that stops reading is dropped timeout after
// the last write it took. A zero timeout or a nil c returns w unchanged.
func StreamWriter(w *bufio.Writer, c net.Conn, timeout time.Duration) *bufio.Writer {
	if timeout <= 0 || c == nil {
		return w
	}
	return bufio.NewWriterSize(extending{w: w, c: c, timeout: timeout}, w.Size())
}

// extending writes to w after extending c's write deadline, and flushes w.
type extending struct {
	w       *bufio.Writer
	c       net.Conn
	timeout time.Duration
}

func (e extending) Write(p []byte) (int, error) {
	if err := e.c.SetWriteDeadline(time.Now().Add(e.timeout)); err != nil {
		return 0, err
	}
	n, err := e.w.Write(p)
	if err == nil {
		err = e.w.Flush()
	}
	return n, err
}
