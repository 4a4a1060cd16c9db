package guestview

import (
	"net"
	"reflect"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/core/instance"
)

func TestDevlxdEnabled(t *testing.T) {
	tests := []struct {
		value string
		set   bool
		want  bool
	}{
		{"", false, true}, {"true", true, true}, {"", true, true}, {"yes", true, true},
		{"false", true, false}, {"FALSE", true, false}, {"0", true, false}, {"no", true, false}, {"off", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			cfg := map[string]string{}
			if tt.set {
				cfg["security.devlxd"] = tt.value
			}
			if got := DevlxdEnabled(cfg); got != tt.want {
				t.Fatalf("DevlxdEnabled(%q) = %v, want %v", tt.value, got, tt.want)
			}
		})
	}
}

func TestListedKeys(t *testing.T) {
	got := ListedKeys(map[string]string{
		"user.b": "1", "user.a": "2", "user.empty": "", "cloud-init.user-data": "x",
		"cloud-init.ssh-keys.k": "root:key", "security.devlxd": "true", "volatile.uuid": "u", "userx": "no",
	})
	want := []string{"cloud-init.user-data", "user.a", "user.b"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ListedKeys = %v, want %v", got, want)
	}
}

func TestGeneratedMAC(t *testing.T) {
	m := GeneratedMAC("u1", "eth0")
	if !strings.HasPrefix(m, "00:16:3e:") || len(m) != 17 {
		t.Fatalf("GeneratedMAC = %q", m)
	}
	if _, err := net.ParseMAC(m); err != nil {
		t.Fatal(err)
	}
	if m != GeneratedMAC("u1", "eth0") {
		t.Fatal("GeneratedMAC is not stable")
	}
	if m == GeneratedMAC("u1", "eth1") || m == GeneratedMAC("u2", "eth0") {
		t.Fatal("GeneratedMAC does not depend on both the instance and the device")
	}
}

func TestDeviceDoesNotAlias(t *testing.T) {
	inst := &instance.Instance{UUID: "u", Devices: map[string]map[string]string{"eth0": {"type": "nic"}}}
	d := Device(inst, "eth0")
	d["x"] = "y"
	if _, ok := inst.Devices["eth0"]["x"]; ok || inst.Devices["eth0"]["hwaddr"] != "" {
		t.Fatal("Device changed the instance's devices")
	}
	if Device(inst, "nope") != nil {
		t.Fatal("Device of an unknown name is not nil")
	}
}
