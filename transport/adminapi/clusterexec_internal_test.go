package adminapi

import (
	"bytes"
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
)

// TestForwardBudget checks what a forwarded request may take: the guest
// file routes are streams (a pull's answer and a push's body last as long
// as they flow), an exec's POST is an ordinary request whose answer is its
// operation, and the other bounds are as they were.
func TestForwardBudget(t *testing.T) {
	const base = 2 * time.Second
	for _, tc := range []struct {
		method, target string
		budget         time.Duration
		stream         bool
		exec           bool
	}{
		{"GET", "/1.0/instances/g/files?path=/etc/hostname", base, true, false},
		{"POST", "/1.0/instances/g/files?path=/srv/blob", base, true, false},
		{"DELETE", "/1.0/instances/g/files?path=/srv/blob", base, false, false},
		{"POST", "/1.0/instances/g/exec", base, false, true},
		{"POST", "/1.0/instances/g/exec/x", base, false, false},
		{"GET", "/1.0/instances/g/console?follow=true", base, true, false},
		{"GET", "/1.0/instances/g", base, false, false},
		{"PUT", "/1.0/instances/g/state", base + 60*time.Second, false, false},
	} {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			app := fiber.New()
			var budget time.Duration
			var stream, exec bool
			app.All("/*", func(c *fiber.Ctx) error {
				budget, stream = forwardBudget(c, base)
				exec = isExecPost(c)
				return nil
			})
			res, err := app.Test(httptest.NewRequest(tc.method, tc.target, bytes.NewReader(nil)), -1)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if budget != tc.budget || stream != tc.stream || exec != tc.exec {
				t.Errorf("budget %v, stream %v, exec %v; want %v, %v, %v", budget, stream, exec, tc.budget, tc.stream, tc.exec)
			}
		})
	}
}

// TestProgressReader checks that a forwarded push's timer restarts at each
// read that moved bytes, and only then.
func TestProgressReader(t *testing.T) {
	calls := 0
	r := &progressReader{r: io.MultiReader(bytes.NewReader([]byte("abc")), bytes.NewReader(nil), bytes.NewReader([]byte("de"))), progress: func() { calls++ }}
	b, err := io.ReadAll(r)
	if err != nil || string(b) != "abcde" {
		t.Fatalf("ReadAll = %q, %v", b, err)
	}
	if calls != 2 {
		t.Errorf("progress called %d times for two reads that moved bytes, want 2", calls)
	}
}
