package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
)

func (s *session) monitorCommand() *cobra.Command {
	var types, instances []string
	var since int64
	cmd := &cobra.Command{
		Use:   "monitor [--type T] [--instance I] [--since ID]",
		Short: "Follow the daemon's events until interrupted",
		Long: "monitor prints the daemon's events as they happen: one JSON object per line with --format json,\n" +
			"YAML documents with --format yaml (both for machines: every field, as the API sends it), a\n" +
			"readable line otherwise: time, id, type, action, instance, who, then the event's context as\n" +
			"key=value, conditions as Type=Status (Reason: message), lists in [], objects in {}.\n" +
			"--since ID first prints every stored event after that id: --since 0 replays the stored log\n" +
			"from its first event, then follows. Without --since, only new events are printed.",
		Args: argsExactly(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if since < 0 {
				return fmt.Errorf("invalid --since %d: must be a non-negative event id", since)
			}
			// An explicit --since (0 included) replays; no flag means from now on.
			f := client.EventFilter{Types: splitList(types), Instances: splitList(instances), Since: since,
				Replay: cmd.Flags().Changed("since")}
			evc, errc := s.client.Events(cmd.Context(), f)
			for ev := range evc {
				if err := s.writeEvent(ev); err != nil {
					return err
				}
			}
			if err, ok := <-errc; ok && err != nil {
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&types, "type", nil, "event types: lifecycle, logging (repeatable or comma-separated)")
	cmd.Flags().StringSliceVar(&instances, "instance", nil, "instance names (repeatable or comma-separated)")
	cmd.Flags().Int64Var(&since, "since", 0, "first print the stored events after this id (0: from the first event; without the flag: only new events)")
	return cmd
}

// splitList trims a string-slice flag's values and drops empty ones.
func splitList(in []string) []string {
	var out []string
	for _, v := range in {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// writeEvent prints one event in the session's format.
func (s *session) writeEvent(ev api.Event) error {
	switch s.format {
	case FormatJSON:
		line, err := json.Marshal(ev)
		if err != nil {
			return fmt.Errorf("encoding event %d: %w", ev.ID, err)
		}
		_, err = fmt.Fprintf(s.out, "%s\n", line)
		return err
	case FormatYAML:
		if _, err := io.WriteString(s.out, "---\n"); err != nil {
			return err
		}
		return writeYAML(s.out, ev)
	}
	_, err := fmt.Fprintln(s.out, eventLine(ev))
	return err
}

// eventLine formats an event for people:
// "2026-11-22T00:00:00.123Z #42 lifecycle instance-ready web1 by devlxd".
func eventLine(ev api.Event) string {
	var b strings.Builder
	b.WriteString(ev.Timestamp.UTC().Format("2006-01-02T15:04:05.000Z07:00"))
	b.WriteString(" #" + strconv.FormatInt(ev.ID, 10) + " " + ev.Type)
	if ev.Type == api.EventTypeLifecycle {
		if lc, err := ev.Lifecycle(); err == nil {
			b.WriteString(" " + lc.Action)
			if ev.Instance != "" {
				b.WriteString(" " + ev.Instance)
			} else {
				b.WriteString(" " + lc.Source)
			}
			if lc.Requestor != nil && lc.Requestor.Protocol != "" {
				b.WriteString(" by " + lc.Requestor.Protocol)
				if lc.Requestor.Username != "" {
					b.WriteString(" (" + lc.Requestor.Username + ")")
				}
			}
			for _, k := range slices.Sorted(maps.Keys(lc.Context)) {
				b.WriteString(" " + k + "=" + contextText(lc.Context[k]))
			}
			return b.String()
		}
	}
	b.WriteString(" " + strings.TrimSpace(string(ev.Metadata)))
	return b.String()
}

// contextText formats a value of an event's context (decoded JSON) for
// people, on one line: a condition as "Ready=False (NotDeclared: message)",
// a list as "[a, b]", an object as "{k=v, ...}" with sorted keys, a number
// as written, a string bare unless it needs quotes (empty, spaces, quotes,
// brackets, commas, control characters).
func contextText(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		if v == "" || strings.ContainsAny(v, " \"'=,[]{}()") || strings.ContainsFunc(v, func(r rune) bool { return !strconv.IsPrint(r) }) {
			return strconv.Quote(v)
		}
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(v)
	case []any:
		parts := make([]string, len(v))
		for i, x := range v {
			parts[i] = contextText(x)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case map[string]any:
		if c, ok := conditionText(v); ok {
			return c
		}
		parts := make([]string, 0, len(v))
		for _, k := range slices.Sorted(maps.Keys(v)) {
			parts = append(parts, k+"="+contextText(v[k]))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return fmt.Sprint(v)
}

// conditionText formats an object with the fields of api.Condition (type
// and status strings, reason and message optional) as "Type=Status",
// followed by " (Reason: message)", " (Reason)" or " (message)"; the
// transition time is left out (the event has its own). It reports false
// for any other object.
func conditionText(m map[string]any) (string, bool) {
	typ, ok1 := m["type"].(string)
	st, ok2 := m["status"].(string)
	if !ok1 || !ok2 || typ == "" {
		return "", false
	}
	for k := range m {
		switch k {
		case "type", "status", "reason", "message", "last_transition_time":
		default:
			return "", false
		}
	}
	reason, _ := m["reason"].(string)
	msg, _ := m["message"].(string)
	out := typ + "=" + st
	switch {
	case reason != "" && msg != "":
		out += " (" + reason + ": " + msg + ")"
	case reason != "":
		out += " (" + reason + ")"
	case msg != "":
		out += " (" + msg + ")"
	}
	return out, true
}
