package devlxd

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/storage"
)

// ETags of the trusted routes, as LXD computes them: the SHA-256, in hex,
// of the JSON encoding (encoding/json's defaults, one trailing newline) of
// a list of the object's fields, sent in double quotes. The fields are
// LXD's (docs/devlxd.md):
//
//   - a storage pool: name, driver, description, config (guestlink's dir
//     pool's config is its source directory, as LXD's dir pool);
//   - a custom volume: name, type ("custom"), config (volatile.devlxd.owner
//     included);
//   - a volume snapshot: description, expiry (guestlink's snapshots do not
//     expire: the zero time, as LXD's without an expiry);
//   - an instance: LXD hashes architecture, local config, local devices,
//     ephemeral and profiles; guestlink's instances have the config and
//     the devices only (volatile keys included, as LXD's local config).
//
// A client sends the ETag it read back in If-Match; a PUT or PATCH of a
// volume, or a PATCH of an instance, whose ETag is no longer that is
// refused 412 and changes nothing.

// etagOf returns LXD's ETag of fields, quoted.
func etagOf(fields ...any) string {
	h := sha256.New()
	if err := json.NewEncoder(h).Encode(fields); err != nil {
		// Strings, maps of strings and times always encode.
		panic(fmt.Sprintf("devlxd: encoding ETag fields: %v", err))
	}
	return `"` + hex.EncodeToString(h.Sum(nil)) + `"`
}

func poolETag(p *storage.Pool) string {
	return etagOf(p.Name, p.Driver, p.Description, map[string]string{"source": p.Source})
}

func volumeETag(v *storage.Volume) string {
	cfg := v.Config
	if cfg == nil {
		cfg = map[string]string{}
	}
	return etagOf(v.Name, v.Type, cfg)
}

func instanceETag(inst *instance.Instance) string {
	cfg, devs := inst.Config, inst.Devices
	if cfg == nil {
		cfg = map[string]string{}
	}
	if devs == nil {
		devs = map[string]map[string]string{}
	}
	return etagOf(cfg, devs)
}

func snapshotETag(v *storage.Volume) string {
	return etagOf(v.Description, time.Time{})
}

// checkIfMatch refuses with LXD's 412 a request whose If-Match (quotes
// trimmed) is set and is not current, the object's quoted ETag now.
func checkIfMatch(c *fiber.Ctx, current string) error {
	match := c.Get(fiber.HeaderIfMatch)
	if match == "" {
		return nil
	}
	match = strings.Trim(match, `"`)
	hash := strings.Trim(current, `"`)
	if hash == match {
		return nil
	}
	return refuse(http.StatusPreconditionFailed, fmt.Sprintf("ETag does not match: %s vs %s. The configuration has been modified since this change began. Please retrieve the updated configuration before proceeding.", hash, match))
}
