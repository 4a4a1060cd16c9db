package instance

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// Instance keys the daemon manages (docs/spec/status.md).
const (
	KeyReady = "volatile.last_state.ready"
	// KeySavedReady keeps the Ready flag a guest had when a stateful stop
	// saved it, so that restoring the state restores Ready too: the guest's
	// software declared it in the memory that comes back.
	KeySavedReady  = "volatile.last_state.saved_ready"
	KeyUUID        = "volatile.uuid"
	KeyVsockID     = "volatile.vsock_id"
	KeyCloudInitID = "volatile.cloud-init.instance-id"
	// KeyBaseImage is the fingerprint of the store image an instance's disk
	// is layered on (set at create from CreateRequest.Image, as LXD's).
	KeyBaseImage          = "volatile.base_image"
	KeySecurityDevlxd     = "security.devlxd"
	KeySecurityDevlxdImgs = "security.devlxd.images"
	KeyLimitsCPU          = "limits.cpu"
	KeyLimitsMemory       = "limits.memory"
)

// MaxNameLength is the longest instance name (a DNS label).
const MaxNameLength = 63

// ValidateName checks that name is a DNS label: 1 to 63 letters, digits and
// hyphens, not starting with a digit or a hyphen and not ending with a
// hyphen. It returns errdefs.ErrInvalid with the precise reason.
func ValidateName(name string) error {
	bad := func(why string) error {
		return fmt.Errorf("invalid instance name %q: %s: %w", name, why, errdefs.ErrInvalid)
	}
	switch {
	case name == "":
		return fmt.Errorf("invalid instance name: the name is empty: %w", errdefs.ErrInvalid)
	case len(name) > MaxNameLength:
		return bad(fmt.Sprintf("longer than %d characters (%d)", MaxNameLength, len(name)))
	}
	for i, r := range name {
		ok := r == '-' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')
		if !ok {
			return bad(fmt.Sprintf("character %q at position %d is not a letter, digit or hyphen", r, i))
		}
	}
	switch {
	case name[0] >= '0' && name[0] <= '9':
		return bad("must not start with a digit")
	case name[0] == '-':
		return bad("must not start with a hyphen")
	case name[len(name)-1] == '-':
		return bad("must not end with a hyphen")
	}
	return nil
}

// lxdBool reports whether v is a boolean as LXD accepts it.
func lxdBool(v string) bool {
	switch strings.ToLower(v) {
	case "true", "false", "1", "0", "yes", "no", "on", "off":
		return true
	}
	return false
}

var (
	uuidRe    = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	cpuSetRe  = regexp.MustCompile(`^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$`)
	memSizeRe = regexp.MustCompile(`^([0-9]+)(B|kB|MB|GB|TB|PB|EB|KiB|MiB|GiB|TiB|PiB|EiB)?$`)
	memPctRe  = regexp.MustCompile(`^([0-9]+)%$`)
)

// keyChecker validates one key's value; an error says what is wrong.
type keyChecker func(v string) error

func checkBool(v string) error {
	if !lxdBool(v) {
		return fmt.Errorf("%q is not a boolean (true or false)", v)
	}
	return nil
}

func checkCPU(v string) error {
	if n, err := strconv.Atoi(v); err == nil {
		if n < 1 {
			return fmt.Errorf("%q: at least one CPU is needed", v)
		}
		return nil
	}
	if !cpuSetRe.MatchString(v) {
		return fmt.Errorf("%q is neither a CPU count nor a CPU set such as 0-3,6", v)
	}
	return nil
}

func checkMemory(v string) error {
	if m := memPctRe.FindStringSubmatch(v); m != nil {
		if n, _ := strconv.Atoi(m[1]); n < 1 || n > 100 {
			return fmt.Errorf("%q: a percentage must be between 1%% and 100%%", v)
		}
		return nil
	}
	m := memSizeRe.FindStringSubmatch(v)
	if m == nil {
		return fmt.Errorf("%q is not a size such as 512MiB or 2GiB", v)
	}
	if n, err := strconv.ParseUint(m[1], 10, 63); err != nil || n == 0 {
		return fmt.Errorf("%q is not a positive size", v)
	}
	return nil
}

func checkVsockID(v string) error {
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil || n < 3 {
		return fmt.Errorf("%q is not a guest CID (an integer from 3 to 4294967295)", v)
	}
	return nil
}

func checkUUID(v string) error {
	if !uuidRe.MatchString(v) {
		return fmt.Errorf("%q is not a lowercase UUID", v)
	}
	return nil
}

func checkNonEmpty(v string) error {
	if v == "" {
		return fmt.Errorf("the value is empty")
	}
	return nil
}

// fixedKeys are the known keys outside the free-form prefixes.
var fixedKeys = map[string]keyChecker{
	KeySecurityDevlxd:     checkBool,
	KeySecurityDevlxdImgs: checkBool,
	KeyLimitsCPU:          checkCPU,
	KeyLimitsMemory:       checkMemory,
	KeyUUID:               checkUUID,
	KeyVsockID:            checkVsockID,
	KeyCloudInitID:        checkNonEmpty,
}

// daemonKeys are set only by the daemon itself.
var daemonKeys = map[string]bool{
	KeyReady:      true,
	KeySavedReady: true,
	KeyBaseImage:  true,
}

// backendKeys is what validateKey knows of an instance's backend: its name
// and its Info (config prefixes and schema); a nil info owns no key.
type backendKeys struct {
	name string
	info *contract.Info
}

// validateKey checks that a user may set (or unset) key to v on an instance
// whose backend is b. A key under one of the backend's config prefixes must
// be one its schema declares (contract.Info.ConfigSchema), so a misspelt key is
// refused before the plugin is called; a backend that declares no schema
// (built before it) checks its own keys in Create. Unsetting an undeclared
// key is allowed (a key an older plugin version knew). unset skips the
// value check.
func validateKey(key, v string, unset bool, b backendKeys) error {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalid)...)
	}
	if err := checkKeySyntax(key); err != nil {
		return err
	}
	if !unset {
		if err := checkValue(key, v); err != nil {
			return err
		}
	}
	if daemonKeys[key] {
		return invalid("configuration key %q is managed by the daemon", key)
	}
	check, ok := fixedKeys[key]
	if !ok {
		check, ok = readinessKeys[key]
	}
	if ok {
		if unset {
			return nil
		}
		if err := check(v); err != nil {
			return invalid("invalid value for %q: %v", key, err)
		}
		return nil
	}
	for _, p := range []string{"user.", "cloud-init."} {
		if strings.HasPrefix(key, p) {
			if len(key) == len(p) {
				return invalid("configuration key %q has nothing after its prefix", key)
			}
			return nil
		}
	}
	if b.info != nil && b.info.OwnsConfigKey(key) {
		if len(b.info.ConfigSchema) == 0 || unset {
			return nil // the backend checks its own keys
		}
		if _, ok := b.info.ConfigKey(key); !ok {
			return invalid("unknown configuration key %q: backend %q has no such key (its keys: %s)",
				key, b.name, strings.Join(slices.Sorted(slices.Values(b.info.ConfigKeyNames())), ", "))
		}
		return nil
	}
	return invalid("unknown configuration key %q", key)
}
