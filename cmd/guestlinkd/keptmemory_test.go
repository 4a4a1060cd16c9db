package main

import "testing"

// TestParseKeptMemory: --devlxd-kept-memory takes a size, or 0 for none
// kept (the help's "0 keeps none", which the size parser alone refused);
// anything else is an error.
func TestParseKeptMemory(t *testing.T) {
	for _, tt := range []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{"0", -1, false},
		{" 0 ", -1, false},
		{"64MiB", 64 << 20, false},
		{"24KiB", 24 << 10, false},
		{"abc", 0, true},
		{"-5MiB", 0, true},
		{"", 0, true},
	} {
		got, err := parseKeptMemory(tt.in)
		if (err != nil) != tt.wantErr || (!tt.wantErr && got != tt.want) {
			t.Errorf("parseKeptMemory(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}
