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
// or status) and publishes its lifecycle event. It is the audit the
// instance's history keeps, beside the daemon's log line.
func (m *Manager) RecordGuestAccess(ctx context.Context, name string, a GuestAccess, by events.Requestor) error {
	e, err := m.lookup(ctx, name)
	if err != nil {
		return fmt.Errorf("recording %s in instance %q: %w", a.Action, name, err)
	}
	m.mu.RLock()
	id, boot, instName := e.rec.ID, e.rec.Boot, e.rec.Name
	m.mu.RUnlock()
	entry := &record.TimelineEntry{InstanceID: id, Time: time.Now().UTC(), Boot: boot, Cause: causeOf(by)}
	evCtx := map[string]any{}
	var what string
	switch a.Action {
	case events.InstanceExec:
		entry.Kind = kindExec
		what = strings.Join(quoteArgs(a.Command), " ")
		evCtx["command"] = a.Command
		if a.ExitCode != nil {
			entry.To = "exit " + strconv.Itoa(*a.ExitCode)
			evCtx["exit_code"] = *a.ExitCode
		} else {
			entry.To = "failed"
		}
	case events.InstanceFilePushed, events.InstanceFileRetrieved, events.InstanceFileDeleted:
		entry.Kind = kindFile
		what = a.Path
		evCtx["path"], evCtx["status"] = a.Path, a.Status
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
		return fmt.Errorf("recording guest access in instance %q: unknown action %q", name, a.Action)
	}
	if a.Err != "" {
		evCtx["error"] = a.Err
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
	m.appendTimeline(ctx, instName, entry)
	m.publish(ctx, []events.Event{events.NewLifecycle(a.Action, instName, evCtx, &by)})
	return nil
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
