package cloudinit

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzValue checks that any seed data and any SSH key value give an answer
// without panicking, and that the answer is the stored value, the empty
// cloud-config, or a cloud-config that carries the merge tag.
func FuzzValue(f *testing.F) {
	f.Add("#cloud-config\nusers:\n- default\n", "root:ssh-rsa AAA")
	f.Add("#cloud-config\nusers: {a: 1}\n", "root:gh:x")
	f.Add("#cloud-config\nusers:\n- name: [x]\n  ssh_authorized_keys: {a: b}\n", "x:ssh-rsa A")
	f.Add("#cloud-config\n&a [*a]\n", "root:k k")
	f.Add("#!/bin/sh\n", "none")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, data, key string) {
		if !utf8.ValidString(data) || !utf8.ValidString(key) {
			// Config values are UTF-8 (the instance service refuses others).
			t.Skip()
		}
		cfg := map[string]string{KeyUserData: data, "cloud-init.ssh-keys.k": key}
		got := Value(cfg, KeyUserData)
		switch {
		case got == data, got == EmptyCloudConfig && data == "":
		case strings.Contains(got, "#cloud-config") && strings.Contains(got, addedTag):
		default:
			t.Fatalf("Value(%q, key %q) = %q", data, key, got)
		}
	})
}
