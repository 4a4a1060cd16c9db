package components

import (
	"strings"
	"testing"

	"github.com/guestlink/guestlink/api"
)

func TestConditions(t *testing.T) {
	tests := []struct {
		name  string
		conds []api.Condition
		want  map[string]string // type -> text of its row
	}{
		{"none", nil, nil},
		{"ready false with a probe", []api.Condition{
			{Type: "AgentConnected", Status: "True", Reason: "AgentConnected"},
			{Type: "Ready", Status: "False", Reason: "ProbeFailed", Message: "http://127.0.0.1:8081/healthz: connection refused"},
			{Type: "Degraded", Status: "False", Reason: "NotDegraded"},
		}, map[string]string{"Ready": "ProbeFailed : http://127.0.0.1:8081/healthz: connection refused", "AgentConnected": "True"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := render(t, Conditions(tt.conds))
			rows := doc.Find("[data-testid=conditions] tr[data-condition]")
			if rows.Length() != len(tt.conds) {
				t.Fatalf("%d rows, want %d", rows.Length(), len(tt.conds))
			}
			if len(tt.conds) == 0 && !strings.Contains(doc.Text(), "No conditions known.") {
				t.Fatal("no empty text")
			}
			for typ, text := range tt.want {
				row := doc.Find("tr[data-condition=" + typ + "]")
				if got := strings.Join(strings.Fields(row.Text()), " "); !strings.Contains(got, text) {
					t.Errorf("%s row %q lacks %q", typ, got, text)
				}
			}
		})
	}
}
