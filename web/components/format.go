// Package components holds the dashboard's templ components and the small
// presentation rules they share (badge tones, durations). Components render
// view data only; they never call services.
package components

import (
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/guestlink/guestlink/api"
)

// Tone is the colour family of a badge.
type Tone string

// Badge tones.
const (
	ToneGood    Tone = "good"    // Ready, agent connected
	ToneActive  Tone = "active"  // Running
	ToneWait    Tone = "wait"    // transitional, agent starting
	ToneIdle    Tone = "idle"    // Stopped, no agent expected
	ToneBad     Tone = "bad"     // Error, agent lost
	ToneNeutral Tone = "neutral" // anything else
)

// Badge is a status or agent badge: its text, tone and a longer description
// for assistive technology and tooltips.
type Badge struct {
	Text  string
	Tone  Tone
	Title string
}

// StatusBadge returns the badge of an instance status name.
func StatusBadge(status string) Badge {
	switch status {
	case "Ready":
		return Badge{"Ready", ToneGood, "Running, and the guest declared itself ready"}
	case "Running":
		return Badge{"Running", ToneActive, "Running; the guest has not declared itself ready"}
	case "Stopped":
		return Badge{"Stopped", ToneIdle, "Not running"}
	case "Error":
		return Badge{"Error", ToneBad, "The backend reported an error"}
	case "Starting", "Stopping", "Freezing", "Pending", "Aborting", "Cancelling":
		return Badge{status, ToneWait, status}
	}
	return Badge{status, ToneNeutral, status}
}

// AgentBadge returns the badge of an instance's agent: "none expected" while
// the instance does not run, "starting" while it runs and no agent spoke yet.
func AgentBadge(inst *api.Instance) Badge {
	running := inst.Status == "Running" || inst.Status == "Ready"
	switch inst.Agent.State {
	case api.AgentConnected:
		return Badge{"connected", ToneGood, "The agent reached the daemon over the guest link"}
	case api.AgentStarted:
		return Badge{"started", ToneWait, "The agent runs and is waiting for the daemon's advertisement"}
	case api.AgentStopped:
		return Badge{"stopped", ToneIdle, "The agent stopped cleanly"}
	case api.AgentLost:
		return Badge{"lost", ToneBad, "No heartbeat from the agent for three periods"}
	}
	if running {
		return Badge{"starting", ToneWait, "Waiting for the agent's first heartbeat"}
	}
	return Badge{"none expected", ToneIdle, "The instance is not running"}
}

// BadgeClass returns the CSS classes of a tone.
func BadgeClass(t Tone) string {
	base := "inline-flex items-center gap-1 rounded-full px-2 py-0.5 text-xs font-semibold ring-1 ring-inset "
	switch t {
	case ToneGood:
		return base + "bg-emerald-100 text-emerald-900 ring-emerald-600/40 dark:bg-emerald-900/60 dark:text-emerald-100"
	case ToneActive:
		return base + "bg-sky-100 text-sky-900 ring-sky-600/40 dark:bg-sky-900/60 dark:text-sky-100"
	case ToneWait:
		return base + "bg-amber-100 text-amber-900 ring-amber-600/40 dark:bg-amber-900/60 dark:text-amber-100"
	case ToneBad:
		return base + "bg-red-100 text-red-900 ring-red-600/40 dark:bg-red-900/60 dark:text-red-100"
	case ToneIdle:
		return base + "bg-slate-100 text-slate-700 ring-slate-500/30 dark:bg-slate-800 dark:text-slate-200"
	}
	return base + "bg-slate-100 text-slate-800 ring-slate-500/30 dark:bg-slate-800 dark:text-slate-100"
}

// BadgeGlyph returns the glyph shown before a badge's text; Ready gets a
// check mark, never a "waiting" glyph.
func BadgeGlyph(t Tone) string {
	switch t {
	case ToneGood:
		return "✓"
	case ToneActive:
		return "▶"
	case ToneWait:
		return "…"
	case ToneBad:
		return "!"
	}
	return "■"
}

// Ago formats the time since t, relative to now, for people ("4s ago").
func Ago(t *time.Time, now time.Time) string {
	if t == nil || t.IsZero() {
		return "—"
	}
	d := now.Sub(*t)
	if d < 0 {
		d = 0
	}
	return Duration(d) + " ago"
}

// Duration formats d compactly: "850ms", "12s", "3m04s", "2h05m".
func Duration(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}

// TimeToReady returns how long the current boot took to become Ready, or "—".
func TimeToReady(inst *api.Instance) string {
	if inst.StartedAt == nil || inst.ReadyAt == nil || inst.ReadyAt.Before(*inst.StartedAt) {
		return "—"
	}
	return Duration(inst.ReadyAt.Sub(*inst.StartedAt))
}

// Stamp returns an RFC 3339 timestamp for machine-readable attributes, or "".
func Stamp(t *time.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// GuestConfig returns the config keys a guest can see (user.* and
// cloud-init.*), sorted.
func GuestConfig(cfg map[string]string) [][2]string {
	var out [][2]string
	for k, v := range cfg {
		if strings.HasPrefix(k, "user.") || strings.HasPrefix(k, "cloud-init.") {
			out = append(out, [2]string{k, v})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}

// SortedKeys returns the keys of m in order.
func SortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// DOMID returns an element id for an instance-scoped element. Instance names
// are DNS labels, so they are safe in ids as they are.
func DOMID(prefix, name string) string { return prefix + "-" + name }

// Plural returns "1 instance", "2 instances", "0 instances".
func Plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// FilterFields returns the query fields of f that differ from the defaults
// (sort by name, first page), in a fixed order.
func FilterFields(f Filter) [][2]string {
	var out [][2]string
	for _, kv := range [][2]string{{"status", f.Status}, {"agent", f.Agent}, {"backend", f.Backend}, {"q", f.Query}, {"sort", f.Sort}} {
		if kv[1] != "" && !(kv[0] == "sort" && kv[1] == "name") {
			out = append(out, kv)
		}
	}
	if f.Page > 1 {
		out = append(out, [2]string{"page", strconv.Itoa(f.Page)})
	}
	return out
}

// PageURL returns the instances page URL for filter f at page p.
func PageURL(f Filter, p int) string {
	f.Page = p
	q := url.Values{}
	for _, kv := range FilterFields(f) {
		q.Set(kv[0], kv[1])
	}
	if len(q) == 0 {
		return "/instances"
	}
	return "/instances?" + q.Encode()
}

// Clustered reports whether an instance runs in a cluster (its location is
// a member's name, not LXD's "none").
func Clustered(inst *api.Instance) bool {
	return inst.Location != "" && inst.Location != "none"
}

// StreamURL returns the live stream a page opens: after its last event id,
// with its scope (Meta.Stream).
func StreamURL(m Meta) string {
	u := "/events?since=" + strconv.FormatInt(m.LastEventID, 10)
	if m.Stream != "" {
		u += "&" + m.Stream
	}
	return u
}
