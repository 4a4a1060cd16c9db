// Package cloudinit builds the cloud-init seed data devlxd serves a guest as
// LXD does: the user-data and vendor-data of an instance with the SSH keys of
// its cloud-init.ssh-keys.<name> keys merged into their cloud-config, the
// routes GET /1.0/config lists so that cloud-init fetches them, and which
// config changes make cloud-init see a new instance (a new instance-id).
package cloudinit

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"go.yaml.in/yaml/v2"
)

// Seed data keys: the cloud-init.* keys take precedence over the older
// user.* ones.
const (
	KeyUserData         = "cloud-init.user-data"
	KeyVendorData       = "cloud-init.vendor-data"
	KeyNetworkConfig    = "cloud-init.network-config"
	KeyOldUserData      = "user.user-data"
	KeyOldVendorData    = "user.vendor-data"
	KeyOldNetworkConfig = "user.network-config"
	// SSHKeysPrefix starts the keys holding one SSH key each, as
	// "<user>:<public key>" or "<user>:<import id>" (e.g. "gh:octocat").
	SSHKeysPrefix = "cloud-init.ssh-keys."
)

// EmptyCloudConfig is what an unset user-data or vendor-data key reads as.
const EmptyCloudConfig = "#cloud-config\n{}\n"

// addedTag marks, as a YAML comment, the values merged from SSH keys.
const addedTag = "#lxd:cloud-init.ssh-keys"

var (
	userDataKeys   = []string{KeyUserData, KeyOldUserData}
	vendorDataKeys = []string{KeyVendorData, KeyOldVendorData}
)

// IsSeedKey reports whether key holds user-data or vendor-data, whose value
// Value computes.
func IsSeedKey(key string) bool {
	return slices.Contains(userDataKeys, key) || slices.Contains(vendorDataKeys, key)
}

// ListedRoutes returns the keys GET /1.0/config lists besides the instance's
// own: when SSH keys are set but no vendor-data (user-data) key is, the
// vendor-data (user-data) keys of both generations, so that cloud-init
// fetches them and receives the keys.
func ListedRoutes(config map[string]string) []string {
	hasKeys, hasVendor, hasUser := false, false, false
	for k, v := range config {
		switch {
		case v == "":
		case strings.HasPrefix(k, SSHKeysPrefix):
			hasKeys = true
		case slices.Contains(vendorDataKeys, k):
			hasVendor = true
		case slices.Contains(userDataKeys, k):
			hasUser = true
		}
	}
	var out []string
	if hasKeys && !hasVendor {
		out = append(out, KeyVendorData, KeyOldVendorData)
	}
	if hasKeys && !hasUser {
		out = append(out, KeyUserData, KeyOldUserData)
	}
	return out
}

// NeedsNewInstanceID reports whether a change of key makes the instance a new
// one for cloud-init, which then applies its seed data again: any
// cloud-init.* key and the older user.user-data, user.vendor-data and
// user.network-config.
func NeedsNewInstanceID(key string) bool {
	return strings.HasPrefix(key, "cloud-init.") ||
		key == KeyOldUserData || key == KeyOldVendorData || key == KeyOldNetworkConfig
}

// Value returns what GET /1.0/config/<key> answers for a user-data or
// vendor-data key (see IsSeedKey):
//   - without SSH keys, the value verbatim, or EmptyCloudConfig when unset;
//   - with SSH keys, the value's cloud-config with a "users" entry per user
//     carrying the keys (ssh_authorized_keys and ssh-authorized-keys, or
//     ssh_import_id and ssh-import-id, each marked with a comment), as LXD
//     renders it. A value that is not a cloud-config (a script, bad YAML)
//     is served verbatim, and so is user-data when adding "users" to it
//     would override the users of vendor-data.
func Value(config map[string]string, key string) string {
	raw := config[key]
	keys := sshKeys(config)
	if len(keys) == 0 {
		if raw == "" {
			return EmptyCloudConfig
		}
		return raw
	}
	own, err := parse(raw)
	if err != nil {
		return raw
	}
	if slices.Contains(userDataKeys, key) {
		// user-data's "users" replaces vendor-data's: add one only when
		// user-data has its own or vendor-data has none.
		vendor, verr := parse(config[effectiveKey(config, "vendor-data")])
		if !own.hasUsers() && verr == nil && vendor.hasUsers() {
			return raw
		}
	}
	out, err := own.merge(keys)
	if err != nil || out == "" {
		return raw
	}
	return out
}

// effectiveKey is the key of a kind of seed data cloud-init uses:
// cloud-init.<kind> when set, else user.<kind>.
func effectiveKey(config map[string]string, kind string) string {
	if config["cloud-init."+kind] == "" && config["user."+kind] != "" {
		return "user." + kind
	}
	return "cloud-init." + kind
}

// userKeys are the SSH keys of one user: public keys and import ids.
type userKeys struct {
	public, imports []string
}

// sshKeyEntry is one user's keys, in the order of the user names.
type sshKeyEntry struct {
	user string
	keys *userKeys
}

// sshKeys collects the cloud-init.ssh-keys.* values by user, in key order.
// A value without ":" is ignored; a key without a space is an import id.
func sshKeys(config map[string]string) []sshKeyEntry {
	names := make([]string, 0)
	for k := range config {
		if strings.HasPrefix(k, SSHKeysPrefix) {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	byUser := map[string]*userKeys{}
	var order []string
	for _, k := range names {
		user, key, ok := strings.Cut(config[k], ":")
		if !ok {
			continue
		}
		u := byUser[user]
		if u == nil {
			u = &userKeys{}
			byUser[user] = u
			order = append(order, user)
		}
		if strings.Contains(key, " ") {
			u.public = append(u.public, key)
		} else {
			u.imports = append(u.imports, key)
		}
	}
	sort.Strings(order)
	out := make([]sshKeyEntry, len(order))
	for i, user := range order {
		out[i] = sshKeyEntry{user: user, keys: byUser[user]}
	}
	return out
}

// cloudConfig is a parsed cloud-config: its leading comment lines and its
// YAML mapping.
type cloudConfig struct {
	comments string
	keys     map[any]any
}

// parse parses a cloud-config. A non-empty value needs "#cloud-config" as
// its first or second line.
func parse(raw string) (*cloudConfig, error) {
	if raw != "" {
		lines := strings.SplitN(raw, "\n", 3)
		found := false
		for _, l := range lines {
			if strings.TrimSpace(l) == "#cloud-config" {
				found = true
			}
		}
		if !found {
			return nil, errors.New("not a #cloud-config")
		}
	}
	c := &cloudConfig{keys: map[any]any{}}
	for _, l := range strings.SplitAfter(raw, "\n") {
		if !strings.HasPrefix(l, "#") {
			break
		}
		c.comments += strings.TrimSuffix(l, "\n") + "\n"
	}
	if err := yaml.Unmarshal([]byte(raw), c.keys); err != nil {
		return nil, fmt.Errorf("parsing cloud-config: %w", err)
	}
	return c, nil
}

// hasUsers reports whether the cloud-config has a non-empty "users".
func (c *cloudConfig) hasUsers() bool {
	v, ok := c.keys["users"]
	return ok && v != ""
}

// String renders the cloud-config: its comments (or "#cloud-config") and
// the YAML, the merge tags turned into comments.
func (c *cloudConfig) String() (string, error) {
	b, err := yaml.Marshal(c.keys)
	if err != nil {
		return "", fmt.Errorf("rendering cloud-config: %w", err)
	}
	head := c.comments
	if head == "" {
		head = "#cloud-config\n"
	}
	return head + strings.ReplaceAll(string(b), addedTag, " "+addedTag), nil
}

// merge adds the SSH keys to the users of the cloud-config and renders it.
func (c *cloudConfig) merge(keys []sshKeyEntry) (string, error) {
	users, err := listAt(c.keys, "users")
	if err != nil {
		return "", err
	}
	for _, e := range keys {
		var target map[any]any
		for i, item := range users {
			if m, ok := item.(map[any]any); ok {
				if m["name"] == e.user {
					target = m
					break
				}
				continue
			}
			name, ok := item.(string)
			if !ok {
				return "", errors.New("invalid user item on users list")
			}
			if name == e.user {
				target = map[any]any{"name": name}
				users[i] = target
				break
			}
		}
		if target == nil {
			target = map[any]any{"name": e.user}
			users = append(users, target)
		}
		if err := addTagged(target, e.keys.public, "ssh_authorized_keys", "ssh-authorized-keys"); err != nil {
			return "", err
		}
		if err := addTagged(target, e.keys.imports, "ssh_import_id", "ssh-import-id"); err != nil {
			return "", err
		}
	}
	c.keys["users"] = users
	return c.String()
}

// addTagged appends each value not yet present, tagged, to the lists under
// every one of fields (both spellings cloud-init has used).
func addTagged(user map[any]any, values []string, fields ...string) error {
	if len(values) == 0 {
		return nil
	}
	for _, f := range fields {
		list, err := listAt(user, f)
		if err != nil {
			return err
		}
		for _, v := range values {
			if !slices.Contains(list, any(v)) {
				list = append(list, v+addedTag)
			}
		}
		user[f] = list
	}
	return nil
}

// listAt returns the list under key of a YAML mapping: a new one when
// missing, one holding the string when it is a string; anything else is
// an error.
func listAt(m map[any]any, key string) ([]any, error) {
	v, ok := m[key]
	if !ok {
		return []any{}, nil
	}
	switch x := v.(type) {
	case []any:
		return x, nil
	case string:
		return []any{x}, nil
	}
	return nil, fmt.Errorf("invalid value under %q", key)
}
