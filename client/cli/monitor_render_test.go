package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/guestlink/guestlink/api"
)

// lifecycleEvent is event 42 with the given lifecycle metadata (JSON), as
// the client decodes it from the daemon's stream.
func lifecycleEvent(t *testing.T, meta string) api.Event {
	t.Helper()
	if !json.Valid([]byte(meta)) {
		t.Fatalf("bad test metadata %s", meta)
	}
	return api.Event{ID: 42, Type: api.EventTypeLifecycle, Instance: "web1",
		Timestamp: time.Date(2026, 11, 27, 10, 0, 0, 123e6, time.UTC), Metadata: json.RawMessage(meta)}
}

// TestEventLine renders events as monitor prints them for people: the
// context's conditions, lists, objects, numbers and strings readably (not
// as Go maps), and a metadata that is no lifecycle as it came.
func TestEventLine(t *testing.T) {
	const head = "2026-11-27T10:00:00.123Z #42 lifecycle "
	for _, tt := range []struct {
		name, meta, want string
	}{
		{"no context", `{"action":"instance-started","source":"/1.0/instances/web1","requestor":{"protocol":"unix","username":"root"}}`,
			head + "instance-started web1 by unix (root)"},
		{"conditions", `{"action":"instance-condition-changed","source":"/1.0/instances/web1","context":{"conditions":[
			{"type":"Ready","status":"False","reason":"ProbeFailing","message":"GET http://127.0.0.1:8081/: connection refused","last_transition_time":"2026-11-27T10:00:00Z"},
			{"type":"AgentConnected","status":"True","reason":"Connected","message":"","last_transition_time":"2026-11-27T09:59:58Z"},
			{"type":"Degraded","status":"True","reason":"","message":"UnitsFailed: systemd-networkd-wait-online","last_transition_time":"2026-11-27T09:59:58Z"}]},
			"requestor":{"protocol":"daemon"}}`,
			head + "instance-condition-changed web1 by daemon conditions=[Ready=False (ProbeFailing: GET http://127.0.0.1:8081/: connection refused), " +
				"AgentConnected=True (Connected), Degraded=True (UnitsFailed: systemd-networkd-wait-online)]"},
		{"scalars", `{"action":"instance-stopped","source":"/1.0/instances/web1","context":{"boot":1000000,"stateful":false,"exit":null,"took":0.25,"by":"api"}}`,
			head + "instance-stopped web1 boot=1000000 by=api exit=null stateful=false took=0.25"},
		{"strings that need quotes", `{"action":"instance-error","source":"/1.0/instances/web1","context":{"error":"start failed: no kernel","empty":"","ctl":"a\u0007b","plain":"/1.0/instances/web1"}}`,
			head + `instance-error web1 ctl="a\ab" empty="" error="start failed: no kernel" plain=/1.0/instances/web1`},
		{"objects and lists", `{"action":"instance-updated","source":"/1.0/instances/web1","context":{"changed":{"user.b":"2","user.a":"x y"},"removed":["user.c","user.d"],"none":[]}}`,
			head + `instance-updated web1 changed={user.a="x y", user.b=2} none=[] removed=[user.c, user.d]`},
		{"an object with type and status and more is no condition", `{"action":"x","source":"/1.0/instances/web1","context":{"o":{"type":"t","status":"s","extra":1}}}`,
			head + "x web1 o={extra=1, status=s, type=t}"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := eventLine(lifecycleEvent(t, tt.meta)); got != tt.want {
				t.Errorf("eventLine =\n %q, want\n %q", got, tt.want)
			}
			if got := eventLine(lifecycleEvent(t, tt.meta)); strings.Contains(got, "map[") {
				t.Errorf("eventLine prints a Go map: %q", got)
			}
		})
	}
	logging := api.Event{ID: 7, Type: api.EventTypeLogging, Timestamp: time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC), Metadata: json.RawMessage(` {"message":"hi"} `)}
	if got, want := eventLine(logging), `2026-11-27T10:00:00.000Z #7 logging {"message":"hi"}`; got != want {
		t.Errorf("logging event = %q, want %q", got, want)
	}
}

// TestEventMachineFormats: with --format json each event is one JSON line
// and with --format yaml a YAML document, both carrying the conditions as
// the API sent them (every field), for machines.
func TestEventMachineFormats(t *testing.T) {
	meta := `{"action":"instance-condition-changed","source":"/1.0/instances/web1","context":{"conditions":[{"type":"Ready","status":"True","reason":"Declared","message":"","last_transition_time":"2026-11-27T10:00:00Z"}]}}`
	ev := lifecycleEvent(t, meta)
	for _, format := range []string{FormatJSON, FormatYAML} {
		t.Run(format, func(t *testing.T) {
			var out bytes.Buffer
			s := &session{format: format, out: &out}
			if err := s.writeEvent(ev); err != nil {
				t.Fatal(err)
			}
			var got struct {
				ID       int64 `json:"id" yaml:"id"`
				Metadata struct {
					Context struct {
						Conditions []api.Condition `json:"conditions" yaml:"conditions"`
					} `json:"context" yaml:"context"`
				} `json:"metadata" yaml:"metadata"`
			}
			text := out.String()
			var err error
			if format == FormatJSON {
				if strings.Count(text, "\n") != 1 {
					t.Fatalf("JSON event is not one line: %q", text)
				}
				err = json.Unmarshal(out.Bytes(), &got)
			} else {
				if !strings.HasPrefix(text, "---\n") {
					t.Fatalf("YAML event does not start a document: %q", text)
				}
				var m map[string]any
				if err = yaml.Unmarshal(out.Bytes(), &m); err == nil {
					var raw []byte
					raw, err = json.Marshal(m) // YAML's keys are the JSON names
					if err == nil {
						err = json.Unmarshal(raw, &got)
					}
				}
			}
			if err != nil {
				t.Fatalf("decoding %s: %v\n%s", format, err, text)
			}
			want := api.Condition{Type: "Ready", Status: "True", Reason: "Declared", LastTransitionTime: time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)}
			if got.ID != 42 || len(got.Metadata.Context.Conditions) != 1 || got.Metadata.Context.Conditions[0] != want {
				t.Fatalf("%s event = %+v, want id 42 and the condition %+v\n%s", format, got, want, text)
			}
		})
	}
}
