package sdk

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// stderrTail keeps the last lines a plugin wrote to stderr, so a plugin that
// dies says why in the error instead of only in the log.
type stderrTail struct {
	mu    sync.Mutex
	lines []string
	cur   strings.Builder
}

const (
	tailLines   = 8
	tailLineMax = 512
)

// Write records p, which go-plugin hands over a line (or line part) at a
// time.
func (t *stderrTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, b := range p {
		if b == '\n' {
			t.flush()
			continue
		}
		if t.cur.Len() < tailLineMax {
			t.cur.WriteByte(b)
		}
	}
	return len(p), nil
}

func (t *stderrTail) flush() {
	line := strings.TrimSpace(t.cur.String())
	t.cur.Reset()
	if line == "" {
		return
	}
	t.lines = append(t.lines, readable(line))
	if len(t.lines) > tailLines {
		t.lines = t.lines[len(t.lines)-tailLines:]
	}
}

// String returns the recorded lines joined by " | ".
func (t *stderrTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := t.lines
	if cur := strings.TrimSpace(t.cur.String()); cur != "" {
		lines = append(lines[:len(lines):len(lines)], cur)
	}
	return strings.Join(lines, " | ")
}

// readable turns one of hclog's JSON lines into "message key=value ...";
// other lines are returned as they are.
func readable(line string) string {
	var entry map[string]any
	if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &entry) != nil {
		return line
	}
	msg, ok := entry["@message"].(string)
	if !ok {
		return line
	}
	var keys []string
	for k := range entry {
		if !strings.HasPrefix(k, "@") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var b strings.Builder
	b.WriteString(msg)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%v", k, entry[k])
	}
	return b.String()
}

// firstLines shortens one of go-plugin's start-up errors to its first
// lines: its long "This usually means ..." diagnosis helps nobody reading
// a plugin list.
func firstLines(msg string) string {
	var keep []string
	for _, l := range strings.Split(msg, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "This usually means") {
			break
		}
		keep = append(keep, strings.TrimRight(l, ":"))
	}
	return strings.Join(keep, ": ")
}
