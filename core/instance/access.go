package instance

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance/record"
)

// Timeline kinds of the admin's access to a guest.
const (
	kindExec = "exec"
	kindFile = "file"
)

// GuestAccess is one exec or file operation in a guest through its agent,
// as its timeline and lifecycle event record it.
type GuestAccess struct {
	// Action is events.InstanceExec, InstanceFilePushed,
	// InstanceFileRetrieved or InstanceFileDeleted.
	Action string
	// Command is the exec's argv.
	Command []string
	// ExitCode is the command's exit code; nil if it did not run to one.
	ExitCode *int
	// Path is the guest path of a file operation.
	Path string
	// Status is the agent's HTTP status of a file operation (0: no
	// answer).
	Status int
	// Err says why the operation failed, if it did.
	Err string
}

// maxAccessDetail bounds the command or path kept in a timeline entry.
const maxAccessDetail = 1024

// RecordGuestAccess records an exec or file operation in the instance's
// timeline (kind "exec" or "file": who, the command or path, the exit code
// or status) and publishes its lifecycle event, which carries what the
// entry is made of (and the boot), so AccessTimeline makes the same entry
// from the event. It is the audit the instance's history keeps, beside
// the daemon's log line.
func (m *Manager) RecordGuestAccess(ctx context.Context, name string, a GuestAccess, by events.Requestor) error {
	e, err := m.lookup(ctx, name)
	if err != nil {
		return fmt.Errorf("recording %s in instance %q: %w", a.Action, name, err)
	}
	m.mu.RLock()
	id, boot, instName := e.rec.ID, e.rec.Boot, e.rec.Name
	m.mu.RUnlock()
	entry, ok := accessEntry(a, by)
	if !ok {
		return fmt.Errorf("recording guest access in instance %q: unknown action %q", name, a.Action)
	}
	entry.InstanceID, entry.Time, entry.Boot = id, time.Now().UTC(), boot
	evCtx := map[string]any{"boot": boot}
	switch a.Action {
	case events.InstanceExec:
		evCtx["command"] = a.Command
		if a.ExitCode != nil {
			evCtx["exit_code"] = *a.ExitCode
		}
	default:
		evCtx["path"], evCtx["status"] = a.Path, a.Status
	}
	if a.Err != "" {
		evCtx["error"] = a.Err
	}
	m.appendTimeline(ctx, instName, &entry)
	m.publish(ctx, []events.Event{events.NewLifecycle(a.Action, instName, evCtx, &by)})
	return nil
}

// accessEntry returns the timeline entry of a (its kind, outcome, detail
// and cause; no instance, time or boot), false for an unknown action.
func accessEntry(a GuestAccess, by events.Requestor) (record.TimelineEntry, bool) {
	entry := record.TimelineEntry{Cause: causeOf(by)}
	var what string
	switch a.Action {
	case events.InstanceExec:
		entry.Kind = kindExec
		what = strings.Join(quoteArgs(a.Command), " ")
		if a.ExitCode != nil {
			entry.To = "exit " + strconv.Itoa(*a.ExitCode)
		} else {
			entry.To = "failed"
		}
	case events.InstanceFilePushed, events.InstanceFileRetrieved, events.InstanceFileDeleted:
		entry.Kind = kindFile
		what = a.Path
		verb := strings.TrimPrefix(a.Action, "instance-file-")
		switch {
		case a.Status >= 200 && a.Status < 300:
			entry.To = verb
		case a.Status == 0:
			entry.To = "failed"
		default:
			entry.To = fmt.Sprintf("refused %d", a.Status)
		}
	default:
		return entry, false
	}
	if len(what) > maxAccessDetail {
		what = what[:maxAccessDetail] + "..."
	}
	entry.Detail = what
	if d := by.Describe(); d != "" {
		entry.Detail += " (by " + d + ")"
	}
	if a.Err != "" {
		entry.Detail += ": " + a.Err
	}
	return entry, true
}

// AccessTimeline returns the timeline entry RecordGuestAccess stored for
// the exec or file operation whose lifecycle event has action, context
// (as decoded from the event's JSON) and requestor: its kind, outcome,
// detail, cause and boot, so a live view shows the entry a reload would.
// It reports false for any other action.
func AccessTimeline(action string, evCtx map[string]any, by *events.Requestor) (TimelineEntry, bool) {
	a := GuestAccess{Action: action}
	if cmd, ok := evCtx["command"].([]any); ok {
		for _, arg := range cmd {
			s, _ := arg.(string)
			a.Command = append(a.Command, s)
		}
	}
	if code, ok := evCtx["exit_code"].(float64); ok {
		c := int(code)
		a.ExitCode = &c
	}
	a.Path, _ = evCtx["path"].(string)
	if st, ok := evCtx["status"].(float64); ok {
		a.Status = int(st)
	}
	a.Err, _ = evCtx["error"].(string)
	var req events.Requestor
	if by != nil {
		req = *by
	}
	rec, ok := accessEntry(a, req)
	entry := TimelineEntry{Kind: rec.Kind, To: rec.To, Cause: rec.Cause, Detail: rec.Detail}
	if b, isNum := evCtx["boot"].(float64); isNum {
		entry.Boot = int64(b)
	}
	return entry, ok
}

// quoteArgs quotes the arguments that need it to read as one word.
func quoteArgs(argv []string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a == "" || strings.ContainsAny(a, " \t\n\"'\\$`;&|<>()*?[]#~") {
			a = strconv.Quote(a)
		}
		out[i] = a
	}
	return out
}
