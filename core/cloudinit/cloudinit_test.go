package cloudinit

import (
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v2"
)

const tag = " #lxd:cloud-init.ssh-keys"

func TestValue(t *testing.T) {
	tests := []struct {
		name   string
		config map[string]string
		key    string
		want   string
	}{
		{"unset", map[string]string{}, KeyUserData, EmptyCloudConfig},
		{"unset old key", map[string]string{}, KeyOldVendorData, EmptyCloudConfig},
		{"verbatim without keys", map[string]string{KeyUserData: "#cloud-config\n# kept\npackages: [curl]\n"}, KeyUserData, "#cloud-config\n# kept\npackages: [curl]\n"},
		{"script verbatim without keys", map[string]string{KeyUserData: "#!/bin/sh\necho hi\n"}, KeyUserData, "#!/bin/sh\necho hi\n"},
		{"script verbatim with keys", map[string]string{KeyUserData: "#!/bin/sh\necho hi\n", "cloud-init.ssh-keys.a": "root:ssh-rsa AAA"}, KeyUserData, "#!/bin/sh\necho hi\n"},
		{"bad yaml verbatim", map[string]string{KeyUserData: "#cloud-config\n: [\n", "cloud-init.ssh-keys.a": "root:ssh-rsa AAA"}, KeyUserData, "#cloud-config\n: [\n"},
		{"public key into unset", map[string]string{"cloud-init.ssh-keys.a": "root:ssh-rsa AAA c@d"}, KeyUserData,
			"#cloud-config\nusers:\n- name: root\n  ssh-authorized-keys:\n  - ssh-rsa AAA c@d" + tag + "\n  ssh_authorized_keys:\n  - ssh-rsa AAA c@d" + tag + "\n"},
		{"import id", map[string]string{"cloud-init.ssh-keys.a": "ubuntu:gh:octocat"}, KeyVendorData,
			"#cloud-config\nusers:\n- name: ubuntu\n  ssh-import-id:\n  - gh:octocat" + tag + "\n  ssh_import_id:\n  - gh:octocat" + tag + "\n"},
		{"no colon ignored", map[string]string{"cloud-init.ssh-keys.a": "none"}, KeyUserData, EmptyCloudConfig},
		{"existing user by name string", map[string]string{
			KeyUserData:             "#cloud-config\nusers:\n- default\n- root\n",
			"cloud-init.ssh-keys.a": "root:ssh-rsa AAA",
		}, KeyUserData, "#cloud-config\nusers:\n- default\n- name: root\n  ssh-authorized-keys:\n  - ssh-rsa AAA" + tag + "\n  ssh_authorized_keys:\n  - ssh-rsa AAA" + tag + "\n"},
		{"existing user map and key kept once", map[string]string{
			KeyUserData:             "#cloud-config\nusers:\n- name: root\n  ssh_authorized_keys: ssh-rsa AAA\n",
			"cloud-init.ssh-keys.a": "root:ssh-rsa AAA",
			"cloud-init.ssh-keys.b": "root:ssh-rsa BBB",
		}, KeyUserData, "#cloud-config\nusers:\n- name: root\n  ssh-authorized-keys:\n  - ssh-rsa AAA" + tag + "\n  - ssh-rsa BBB" + tag + "\n  ssh_authorized_keys:\n  - ssh-rsa AAA\n  - ssh-rsa BBB" + tag + "\n"},
		{"user-data keeps vendor users", map[string]string{
			KeyVendorData:           "#cloud-config\nusers:\n- default\n",
			"cloud-init.ssh-keys.a": "root:ssh-rsa AAA",
		}, KeyUserData, ""},
		{"vendor-data with users merged", map[string]string{
			KeyVendorData:           "#cloud-config\nusers:\n- default\n",
			"cloud-init.ssh-keys.a": "root:ssh-rsa AAA",
		}, KeyVendorData, "#cloud-config\nusers:\n- default\n- name: root\n  ssh-authorized-keys:\n  - ssh-rsa AAA" + tag + "\n  ssh_authorized_keys:\n  - ssh-rsa AAA" + tag + "\n"},
		{"invalid users item", map[string]string{
			KeyUserData:             "#cloud-config\nusers:\n- [a]\n",
			"cloud-init.ssh-keys.a": "root:ssh-rsa AAA",
		}, KeyUserData, "#cloud-config\nusers:\n- [a]\n"},
		{"cloud-config on second line", map[string]string{
			KeyUserData:             "## template: jinja\n#cloud-config\nhostname: x\n",
			"cloud-init.ssh-keys.a": "root:ssh-rsa AAA",
		}, KeyUserData, "## template: jinja\n#cloud-config\nhostname: x\nusers:\n- name: root\n  ssh-authorized-keys:\n  - ssh-rsa AAA" + tag + "\n  ssh_authorized_keys:\n  - ssh-rsa AAA" + tag + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Value(tt.config, tt.key); got != tt.want {
				t.Fatalf("Value(%q) =\n%q\nwant\n%q", tt.key, got, tt.want)
			}
		})
	}
}

func TestListedRoutes(t *testing.T) {
	tests := []struct {
		name   string
		config map[string]string
		want   []string
	}{
		{"no keys", map[string]string{KeyUserData: "x"}, nil},
		{"keys only", map[string]string{"cloud-init.ssh-keys.a": "root:k"}, []string{KeyVendorData, KeyOldVendorData, KeyUserData, KeyOldUserData}},
		{"keys and user-data", map[string]string{"cloud-init.ssh-keys.a": "root:k", KeyOldUserData: "x"}, []string{KeyVendorData, KeyOldVendorData}},
		{"keys and both", map[string]string{"cloud-init.ssh-keys.a": "root:k", KeyUserData: "x", KeyOldVendorData: "y"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ListedRoutes(tt.config); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ListedRoutes = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestNeedsNewInstanceID(t *testing.T) {
	for key, want := range map[string]bool{
		KeyUserData: true, KeyVendorData: true, KeyNetworkConfig: true, "cloud-init.ssh-keys.x": true,
		KeyOldUserData: true, KeyOldVendorData: true, KeyOldNetworkConfig: true,
		"user.foo": false, "user.meta-data": false, "limits.cpu": false, "security.devlxd": false,
	} {
		if got := NeedsNewInstanceID(key); got != want {
			t.Errorf("NeedsNewInstanceID(%q) = %v, want %v", key, got, want)
		}
	}
}

// TestMergedKeysParseBack checks what cloud-init reads from the merged
// cloud-config: a real-size key (folded over lines by the YAML emitter, as
// LXD's is) comes back whole, the tags being YAML comments.
func TestMergedKeysParseBack(t *testing.T) {
	long := "ssh-rsa " + strings.Repeat("AAAAB3NzaC1yc2E", 40) + " alice@laptop"
	out := Value(map[string]string{
		KeyUserData:             "#cloud-config\nusers:\n- default\n",
		"cloud-init.ssh-keys.a": "alice:" + long,
		"cloud-init.ssh-keys.b": "alice:gh:alice",
	}, KeyUserData)
	var got struct {
		Users []any `yaml:"users"`
	}
	if err := yaml.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("merged user-data does not parse: %v\n%s", err, out)
	}
	if len(got.Users) != 2 || got.Users[0] != "default" {
		t.Fatalf("users %v, want default then alice:\n%s", got.Users, out)
	}
	alice, _ := got.Users[1].(map[any]any)
	for field, want := range map[string]string{
		"ssh_authorized_keys": long, "ssh-authorized-keys": long, "ssh_import_id": "gh:alice", "ssh-import-id": "gh:alice",
	} {
		list, _ := alice[field].([]any)
		if len(list) != 1 || list[0] != want {
			t.Errorf("%s = %v, want [%s]", field, alice[field], want)
		}
	}
	if alice["name"] != "alice" {
		t.Errorf("user %v", alice)
	}
}
