package cli

import (
	"bytes"
	"testing"
)

func TestRowKeepsOneLine(t *testing.T) {
	tests := []struct {
		name  string
		cells []string
		want  string
	}{
		{"plain", []string{"a:", "b"}, "a:\tb\n"},
		{"empty cell", []string{"a:", ""}, "a:\t-\n"},
		{"multi-line value", []string{"user.meta-data:", "vendor: acme\nregion: eu\n"}, "user.meta-data:\tvendor: acme\\nregion: eu\\n\n"},
		{"tab and carriage return", []string{"k:", "a\tb\r"}, "k:\ta b\\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			row(&b, tt.cells...)
			if b.String() != tt.want {
				t.Errorf("row = %q, want %q", b.String(), tt.want)
			}
		})
	}
}
