package devlxd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/guestlink/guestlink/core/pki"
)

// TicketKeysFile is the name of the session ticket keys' file in the
// daemon's pki directory (Config.TicketKeysFile).
const TicketKeysFile = "devlxd-ticket-keys"

// maxKeysFile bounds what readKeysFile reads: two keys take about 200 bytes.
const maxKeysFile = 4 << 10

// keysFile is the JSON form of the ticket keys' file: the current key, then
// the previous one, each with the time it became current.
type keysFile struct {
	Keys []keysFileKey `json:"keys"`
}

type keysFileKey struct {
	Created time.Time `json:"created"`
	Key     []byte    `json:"key"` // 32 bytes, base64 in the file
}

// writeKeysFile writes the keys of set to path with mode 0600 (a new file
// renamed over the old one).
func writeKeysFile(path string, set *ticketKeySet) error {
	var f keysFile
	for _, k := range []*ticketKey{set.cur, set.prev} {
		if k != nil {
			f.Keys = append(f.Keys, keysFileKey{Created: k.created, Key: k.raw})
		}
	}
	data, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("devlxd: encoding session ticket keys: %w", err)
	}
	if err := pki.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("devlxd: session ticket keys: %w", err)
	}
	return nil
}

// readKeysFile returns the keys kept in path that may still open a ticket
// at now (usable), newest first; nothing when there is no file. It refuses
// (an error, no key) a file that is not regular, that group or others may
// read or write, or that is owned by neither root nor this user: keys
// someone else may have read would let them forge tickets, so they are not
// used, and the caller makes fresh ones. A key that became current two
// periods ago or more, or claims to from the future, is left out.
func readKeysFile(path string, now time.Time, period time.Duration) ([]*ticketKey, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("devlxd: session ticket keys: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("devlxd: session ticket keys %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("devlxd: session ticket keys %s: not a regular file, not used", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("devlxd: session ticket keys %s: readable or writable by group or others (mode %04o), not used", path, perm)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("devlxd: session ticket keys %s: owned by uid %d, neither root nor this user, not used", path, st.Uid)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxKeysFile+1))
	if err != nil {
		return nil, fmt.Errorf("devlxd: session ticket keys %s: %w", path, err)
	}
	if len(data) > maxKeysFile {
		return nil, fmt.Errorf("devlxd: session ticket keys %s: larger than %d bytes, not used", path, maxKeysFile)
	}
	var kf keysFile
	if err := json.Unmarshal(data, &kf); err != nil {
		return nil, fmt.Errorf("devlxd: session ticket keys %s: %w", path, err)
	}
	expiry := ticketKeys{period: period}
	var keys []*ticketKey
	for _, fk := range kf.Keys {
		if len(fk.Key) != 32 {
			return nil, fmt.Errorf("devlxd: session ticket keys %s: a key of %d bytes, want 32, not used", path, len(fk.Key))
		}
		k, err := newTicketKey(fk.Key, fk.Created)
		if err != nil {
			return nil, err
		}
		if expiry.usable(k, now) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b *ticketKey) int { return b.created.Compare(a.created) })
	if len(keys) > 2 {
		keys = keys[:2]
	}
	return keys, nil
}
