package devlxd

import (
	"strings"
	"testing"

	"github.com/guestlink/guestlink/core/instance"
)

func TestDecodeDeclaration(t *testing.T) {
	long := strings.Repeat("a", 1025)
	tests := []struct {
		name, body string
		want       instance.Declaration
		err        string
	}{
		{"lxd ready", `{"state":"Ready"}`, instance.Declaration{State: "Ready"}, ""},
		{"lxd started", `{"state":"Started"}`, instance.Declaration{State: "Started"}, ""},
		{"unknown fields ignored", `{"state":"Ready","colour":"blue"}`, instance.Declaration{State: "Ready"}, ""},
		{"first value only", `{"state":"Ready"} garbage`, instance.Declaration{State: "Ready"}, ""},
		{"degraded with reason", `{"state":"Degraded","reason":"UnitsFailed","message":"nginx.service\nfoo.service"}`,
			instance.Declaration{State: "Degraded", Reason: "UnitsFailed", Message: "nginx.service\nfoo.service"}, ""},
		{"started with reason", `{"state":"Started","reason":"ProbeFailed","message":"http://127.0.0.1:8081/: connection refused"}`,
			instance.Declaration{State: "Started", Reason: "ProbeFailed", Message: "http://127.0.0.1:8081/: connection refused"}, ""},
		{"lowercase state", `{"state":"ready"}`, instance.Declaration{}, `Invalid state "ready"`},
		{"not json", `{`, instance.Declaration{}, "Invalid request body"},
		{"reason with space", `{"state":"Started","reason":"Probe failed"}`, instance.Declaration{}, `Invalid reason "Probe failed": must be a CamelCase word`},
		{"reason starts with digit", `{"state":"Started","reason":"9Lives"}`, instance.Declaration{}, "must be a CamelCase word"},
		{"reason too long", `{"state":"Started","reason":"` + strings.Repeat("A", 65) + `"}`, instance.Declaration{}, "Invalid reason: longer than 64 bytes"},
		{"message too long", `{"state":"Started","message":"` + long + `"}`, instance.Declaration{}, "Invalid message: longer than 1024 bytes"},
		{"message control", `{"state":"Started","message":"a\u0007b"}`, instance.Declaration{}, "Invalid message: control character U+0007"},
		{"message not UTF-8", "{\"state\":\"Started\",\"message\":\"caf\xe9\"}", instance.Declaration{}, "request body is not valid UTF-8 (byte offset 33)"},
		{"message with a lone surrogate escape", `{"state":"Started","message":"x\udc00"}`, instance.Declaration{}, "request body is not valid UTF-8 (byte offset 31)"},
		{"message multi-byte", `{"state":"Started","reason":"ProbeFailed","message":"café 日本"}`, instance.Declaration{State: "Started", Reason: "ProbeFailed", Message: "café 日本"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeDeclaration([]byte(tt.body))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}
