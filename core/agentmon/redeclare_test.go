package agentmon

import (
	"errors"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/link/devlxdapi"
)

// TestParseAnswer: what an agent may hand back in its answer to an
// advertisement, and what is refused: the declaration is the guest's word
// and is checked as devlxd checks a PATCH /1.0 (a guest cannot slip in a
// state, reason or message through this path that devlxd would refuse).
func TestParseAnswer(t *testing.T) {
	sync := func(meta string) string {
		return `{"type":"sync","status":"Success","status_code":200,"metadata":` + meta + `}`
	}
	tests := []struct {
		name    string
		body    string
		want    *devlxdapi.StatePut
		wantErr string
	}{
		{"null metadata (an agent before the header, or nothing to restore)", sync("null"), nil, ""},
		{"no metadata", `{"type":"sync","status":"Success","status_code":200}`, nil, ""},
		{"empty answer object", sync(`{}`), nil, ""},
		{"ready", sync(`{"declaration":{"state":"Ready"}}`), &devlxdapi.StatePut{State: "Ready"}, ""},
		{"degraded with reason and message", sync(`{"declaration":{"state":"Degraded","reason":"DiskFull","message":"/var at 99 %"}}`),
			&devlxdapi.StatePut{State: "Degraded", Reason: "DiskFull", Message: "/var at 99 %"}, ""},
		{"not JSON", `<html>`, nil, "decoding the agent's answer"},
		{"metadata not an object", sync(`[1]`), nil, "decoding the agent's answer"},
		{"unknown state", sync(`{"declaration":{"state":"ready"}}`), nil, `Invalid state "ready"`},
		{"empty state", sync(`{"declaration":{}}`), nil, `Invalid state ""`},
		{"reason not a word", sync(`{"declaration":{"state":"Ready","reason":"two words"}}`), nil, "Invalid reason"},
		{"reason too long", sync(`{"declaration":{"state":"Ready","reason":"` + strings.Repeat("A", devlxdapi.MaxReasonLen+1) + `"}}`), nil, "Invalid reason: longer than"},
		{"message with a control character", sync(`{"declaration":{"state":"Ready","message":"a\u001bb"}}`), nil, "Invalid message: control character"},
		{"message too long", sync(`{"declaration":{"state":"Ready","message":"` + strings.Repeat("m", devlxdapi.MaxMessageLen+1) + `"}}`), nil, "Invalid message: longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseAnswer([]byte(tt.body))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, errdefs.ErrInvalid) {
					t.Fatalf("parseAnswer = %+v, %v; want an ErrInvalid containing %q", got, err, tt.wantErr)
				}
				if got != nil {
					t.Fatalf("a refused answer returned %+v", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseAnswer: %v", err)
			}
			if (got == nil) != (tt.want == nil) || (got != nil && *got != *tt.want) {
				t.Fatalf("parseAnswer = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestAsksDeclaration: an advertisement asks for the guest's declaration
// only when the daemon records declarations itself and has none of this
// boot (the Ready flag unset, as right after the daemon started); once one
// is recorded ("true" or "false") it stops asking, so a handed-back Ready is
// recorded (and its instance-ready emitted) once.
func TestAsksDeclaration(t *testing.T) {
	plain := &fakeInstances{}
	declaring := &readyInstances{fakeInstances: plain}
	for _, tt := range []struct {
		name  string
		insts Instances
		ready *string
		want  bool
	}{
		{"no Declarer: the agent PATCHes", plain, nil, false},
		{"unset after the daemon started", declaring, nil, true},
		{"set empty", declaring, new(string), true},
		{"Ready recorded", declaring, ptr("true"), false},
		{"not Ready recorded", declaring, ptr("false"), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			inst := &instance.Instance{Config: map[string]string{}}
			if tt.ready != nil {
				inst.Config[instance.KeyReady] = *tt.ready
			}
			if got := asksDeclaration(tt.insts, inst); got != tt.want {
				t.Fatalf("asksDeclaration = %v, want %v", got, tt.want)
			}
		})
	}
}

func ptr(s string) *string { return &s }
