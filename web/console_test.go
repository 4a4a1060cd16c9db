package web

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/errdefs"
)

// fakeConsoles maps instance names to console log paths.
type fakeConsoles map[string]string

func (f fakeConsoles) ConsoleLog(_ context.Context, name string) (string, error) {
	p, ok := f[name]
	if !ok {
		return "", fmt.Errorf("instance %q: %w", name, errdefs.ErrNotFound)
	}
	return p, nil
}

func writeLog(t *testing.T, path, s string, flag int) {
	t.Helper()
	f, err := os.OpenFile(path, flag|os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func TestConsolePanel(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small.log")
	writeLog(t, small, "Booting \x1b[1;31mFAILED\x1b[0m <script>alert(1)</script>\r\n\x1b]0;title\x07ok\n", os.O_TRUNC)
	big := filepath.Join(dir, "big.log")
	writeLog(t, big, strings.Repeat("old line\n", 20000)+"the last line\n", os.O_TRUNC)
	inst := newFakeInstances(running("web1", instance.AgentConnected), running("web2", instance.AgentConnected), running("web3", instance.AgentNone))
	app, _ := newTestApp(inst, newBusEvents(), Config{Consoles: fakeConsoles{"web1": small, "web2": big, "web3": ""}})

	for _, tc := range []struct {
		name, inst string
	}{
		{"colours as classes, markup as text", "web1"},
		{"tail of a big log from a line start", "web2"},
		{"guest never started", "web3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, body, doc := get(t, app, "/instances/"+tc.inst)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status %d", res.StatusCode)
			}
			if strings.ContainsRune(body, 0x1b) {
				t.Fatal("the page carries a raw escape character")
			}
			pre := doc.Find(`[data-testid="console"]`)
			text := pre.Text()
			switch tc.inst {
			case "web1":
				if text != "Booting FAILED <script>alert(1)</script>\nok\n" {
					t.Errorf("console text %q", text)
				}
				if pre.Find("script").Length() != 0 {
					t.Error("guest output became a script element")
				}
				if got := pre.Find(".ansi-fg-1.ansi-bold").Text(); got != "FAILED" {
					t.Errorf("red bold text %q, want FAILED", got)
				}
				if got := pre.AttrOr("data-offset", ""); got != fmt.Sprint(fileSize(t, small)) {
					t.Errorf("stream offset %s, want the log size", got)
				}
				if got := doc.Find(`[data-testid="console-download"]`).AttrOr("href", ""); got != "/instances/web1/console.log" {
					t.Errorf("download link %q", got)
				}
			case "web2":
				if len(text) > ConsoleTail || !strings.HasPrefix(text, "old line\n") || !strings.HasSuffix(text, "the last line\n") {
					t.Errorf("console text of %d bytes, starting %q: want at most %d bytes, whole lines, the last one last", len(text), text[:20], ConsoleTail)
				}
				if doc.Find(`[data-testid="console-skipped"]`).Length() != 1 {
					t.Error("no notice that the start of the log is left out")
				}
			case "web3":
				if text != "" || pre.Length() != 1 {
					t.Errorf("console of a guest never started: %d elements, %q", pre.Length(), text)
				}
			}
		})
	}

	t.Run("no console service", func(t *testing.T) {
		app, _ := newTestApp(inst, newBusEvents(), Config{})
		_, _, doc := get(t, app, "/instances/web1")
		if doc.Find(`[data-testid="console-unavailable"]`).Length() != 1 {
			t.Error("no 'no console' notice")
		}
	})
}

func fileSize(t *testing.T, path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

func TestConsoleDownload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "console.log")
	content := strings.Repeat("line \x1b[32mgreen\x1b[0m\n", 10000)
	writeLog(t, path, content, os.O_TRUNC)
	app, _ := newTestApp(newFakeInstances(running("web1", instance.AgentConnected)), newBusEvents(), Config{Consoles: fakeConsoles{"web1": path}})
	res, body, _ := get(t, app, "/instances/web1/console.log")
	if res.StatusCode != http.StatusOK || body != content {
		t.Fatalf("download: %d, %d bytes; want 200 and the log as written (%d bytes)", res.StatusCode, len(body), len(content))
	}
	if got := res.Header.Get("Content-Disposition"); got != `attachment; filename="web1-console.log"` {
		t.Errorf("Content-Disposition %q", got)
	}
	if got := res.Header.Get("Content-Security-Policy"); got == "" {
		t.Error("no security headers")
	}
	if res, _, _ := get(t, app, "/instances/nope/console.log"); res.StatusCode != http.StatusNotFound {
		t.Errorf("unknown instance: %d, want 404", res.StatusCode)
	}
}

// consoleText decodes a console message's text.
func consoleText(t *testing.T, m sseMessage) consoleMessage {
	t.Helper()
	var msg consoleMessage
	if err := json.Unmarshal([]byte(m.Data), &msg); err != nil {
		t.Fatalf("console message %q: %v", m.Data, err)
	}
	return msg
}

func (m consoleMessage) text() string {
	var b strings.Builder
	for _, s := range m.Segments {
		b.WriteString(s.Text)
	}
	return b.String()
}

func TestConsoleStream(t *testing.T) {
	noLeaks(t)
	path := filepath.Join(t.TempDir(), "console.log")
	writeLog(t, path, "before\n", os.O_TRUNC)
	inst := newFakeInstances(running("web1", instance.AgentConnected))
	app, d := newTestApp(inst, newBusEvents(), Config{Consoles: fakeConsoles{"web1": path}, Heartbeat: 50 * time.Millisecond})
	url := server(t, app, d)

	c := openStream(t, url+"/instances/web1/console/stream?from=7", nil)
	writeLog(t, path, "after \x1b[33mwarn\x1b[0m\n", os.O_APPEND)
	m := c.next(t, "console")
	msg := consoleText(t, m)
	if msg.text() != "after warn\n" || msg.Segments[1].Class != "ansi-fg-3" {
		t.Fatalf("first message %+v, want the new line with its colour", msg)
	}
	if m.ID != fmt.Sprint(msg.Offset) || msg.Offset != fileSize(t, path) {
		t.Fatalf("id %s offset %d, want both the log size %d", m.ID, msg.Offset, fileSize(t, path))
	}

	// A reconnect resumes from the last id it saw.
	c2 := openStream(t, url+"/instances/web1/console/stream?from=0", map[string]string{"Last-Event-ID": m.ID})
	writeLog(t, path, "third\n", os.O_APPEND)
	if got := consoleText(t, c2.next(t, "console")).text(); got != "third\n" {
		t.Fatalf("resumed stream sent %q, want only the new line", got)
	}

	// A new boot truncates the log: the stream says so and starts again.
	writeLog(t, path, "boot 2\n", os.O_TRUNC)
	if got := consoleText(t, c2.next(t, "console")); got.text() != "boot 2\n" || !got.Reset {
		t.Fatalf("after truncation: %+v, want the new log flagged as reset", got)
	}

	// The guest deleted: the log goes and the streams end.
	os.Remove(path)
	for _, s := range []*sseClient{c, c2} {
		for range s.msgs {
		}
	}
	waitStreams(t, d, 0)

	for _, tc := range []struct {
		name, target string
		code         int
	}{
		{"bad offset", "/instances/web1/console/stream?from=x", http.StatusBadRequest},
		{"unknown instance", "/instances/nope/console/stream", http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := http.Get(url + tc.target)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != tc.code {
				t.Fatalf("GET %s: %d, want %d", tc.target, res.StatusCode, tc.code)
			}
		})
	}
}

// TestConsoleStreamLag checks that a page falling behind a fast guest is
// sent the newest bytes and told how many it missed, not the whole backlog.
func TestConsoleStreamLag(t *testing.T) {
	noLeaks(t)
	path := filepath.Join(t.TempDir(), "console.log")
	writeLog(t, path, strings.Repeat("x", 10*ConsoleMaxLag)+"END\n", os.O_TRUNC)
	app, d := newTestApp(newFakeInstances(running("web1", instance.AgentConnected)), newBusEvents(), Config{Consoles: fakeConsoles{"web1": path}, Heartbeat: 50 * time.Millisecond})
	url := server(t, app, d)
	c := openStream(t, url+"/instances/web1/console/stream?from=0", nil)
	first := consoleText(t, c.next(t, "console"))
	if want := int64(10*ConsoleMaxLag + 4 - ConsoleMaxLag); first.Skipped != want {
		t.Fatalf("skipped %d, want %d", first.Skipped, want)
	}
	var got strings.Builder
	got.WriteString(first.text())
	for !strings.HasSuffix(got.String(), "END\n") {
		got.WriteString(consoleText(t, c.next(t, "console")).text())
	}
	if got.Len() != ConsoleMaxLag {
		t.Fatalf("sent %d bytes, want the last %d", got.Len(), ConsoleMaxLag)
	}
	c.cancel()
	waitStreams(t, d, 0)
}

// TestConsoleStreamEndsWithSession: a revoked session stops receiving the
// console within a heartbeat, quiet guest or printing one.
func TestConsoleStreamEndsWithSession(t *testing.T) {
	for _, printing := range []bool{false, true} {
		t.Run(fmt.Sprintf("printing=%v", printing), func(t *testing.T) {
			noLeaks(t)
			path := filepath.Join(t.TempDir(), "console.log")
			writeLog(t, path, "hello\n", os.O_TRUNC)
			fs := newFakeSessions()
			app, d := newTestApp(newFakeInstances(running("web1", instance.AgentConnected)), newBusEvents(), Config{Sessions: fs, Consoles: fakeConsoles{"web1": path}, Heartbeat: 20 * time.Millisecond})
			s := signIn(t, app, fs)
			base := server(t, app, d)
			c := openStream(t, base+"/instances/web1/console/stream?from=0", map[string]string{"Cookie": sessionCookie + "=" + s.sid})
			defer c.cancel()
			c.next(t, "console")
			if err := fs.Revoke(t.Context(), s.sid); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() { // a guest that keeps printing: Follow never idles
				defer close(done)
				for {
					select {
					case <-stop:
						return
					default:
						writeLog(t, path, "more\n", os.O_APPEND)
					}
					if !printing {
						return
					}
				}
			}()
			deadline := time.After(20 * time.Second)
			for ended := false; !ended; {
				select {
				case _, ok := <-c.msgs: // closed when the stream ends
					ended = !ok
				case <-deadline:
					t.Fatal("the console stream still runs 20s after its session was revoked")
				}
			}
			close(stop)
			<-done
			waitStreams(t, d, 0)
		})
	}
}
