package cli

import (
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
)

// transfer shows the progress of one file copy on a terminal: bytes, rate
// and, with a known size, a bar and the time left; it draws nothing
// (its methods pass through) when the output is not a terminal, so that
// what scripts read stays byte for byte what it was.
type transfer struct {
	bar *progressbar.ProgressBar // nil: not drawing
}

// transferMinSize is the smallest copy that draws a bar: a small file is
// done before a bar could say anything.
const transferMinSize = 1 << 20

// transferThrottle is the least time between two draws of a bar.
var transferThrottle = 100 * time.Millisecond

// newTransfer starts showing a copy of size bytes (-1 unknown) on w when
// tty (see drawTransfers), described by desc ("push app.tar").
func newTransfer(w io.Writer, tty bool, size int64, desc string) *transfer {
	if !tty || (size >= 0 && size < transferMinSize) {
		return &transfer{}
	}
	return &transfer{bar: progressbar.NewOptions64(size,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowBytes(true),
		progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(transferThrottle),
		progressbar.OptionSetRenderBlankState(true),
		progressbar.OptionClearOnFinish(),
	)}
}

// drawTransfers reports whether cmd's copies draw progress: when its
// standard output and error are both terminals (progress goes to standard
// error; a command whose output is piped or redirected stays quiet).
func drawTransfers(cmd *cobra.Command) bool {
	return isTerminal(cmd.OutOrStdout()) && isTerminal(cmd.ErrOrStderr())
}

// reader returns r counted into the bar.
func (t *transfer) reader(r io.Reader) io.Reader {
	if t.bar == nil {
		return r
	}
	return io.TeeReader(r, t.bar)
}

// writer returns w counted into the bar.
func (t *transfer) writer(w io.Writer) io.Writer {
	if t.bar == nil {
		return w
	}
	return io.MultiWriter(w, t.bar)
}

// done clears the bar (its line is left empty) and ends it.
func (t *transfer) done() {
	if t.bar != nil {
		_ = t.bar.Finish()
		_ = t.bar.Close()
	}
}

// set moves the bar to n bytes done (a count read from elsewhere, as the
// daemon's import progress).
func (t *transfer) set(n int64) {
	if t.bar != nil {
		_ = t.bar.Set64(n)
	}
}
