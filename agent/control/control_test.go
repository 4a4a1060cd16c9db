package control

import (
	"strings"
	"testing"
)

func TestParseEvent(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		wantErr string
	}{
		{"config", `{"type":"config","timestamp":"2026-11-22T00:00:00.123456789Z","metadata":{"key":"user.a","old_value":"","value":"b"}}`, ""},
		{"device spaced", `{"type":"device","timestamp":"2026-11-22T00:00:00Z","metadata": { "action":"added" } }`, ""},
		{"unknown field", `{"type":"config","timestamp":"2026-11-22T00:00:00Z","metadata":{},"x":1}`, "unknown field"},
		{"lifecycle", `{"type":"lifecycle","timestamp":"2026-11-22T00:00:00Z","metadata":{}}`, `unknown event type "lifecycle"`},
		{"no timestamp", `{"type":"config","metadata":{}}`, "timestamp"},
		{"null metadata", `{"type":"config","timestamp":"2026-11-22T00:00:00Z","metadata":null}`, "metadata must be a JSON object"},
		{"two objects", `{"type":"config","timestamp":"2026-11-22T00:00:00Z","metadata":{}}{}`, "trailing data"},
		{"not json", `config`, "decoding event"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := ParseEvent([]byte(tt.body))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("ParseEvent: %v", err)
				}
				if strings.ContainsAny(string(e.Metadata), " \n") {
					t.Fatalf("metadata not compacted: %s", e.Metadata)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ParseEvent error = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}
