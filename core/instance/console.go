package instance

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/guestlink/guestlink/core/console"
	"github.com/guestlink/guestlink/errdefs"
)

// ConsoleLog returns the path of the console log of the instance called
// name, as its backend reports it (GuestState.Details "console_log", an
// absolute path on this host). An instance whose guest was never created
// has none yet: "" and no error. A backend that keeps no console log, or
// gives a relative path, is errdefs.ErrNotSupported.
func (m *Manager) ConsoleLog(ctx context.Context, name string) (string, error) {
	e, err := m.lookup(ctx, name)
	if err != nil {
		return "", err
	}
	m.mu.RLock()
	name, backend, h := e.rec.Name, e.rec.Backend, slices.Clone(e.rec.Handle)
	m.mu.RUnlock()
	if len(h) == 0 {
		return "", nil
	}
	b, err := m.backends.Backend(backend)
	if err != nil {
		return "", fmt.Errorf("console of instance %q: %w", name, err)
	}
	st, err := b.State(ctx, h)
	if err != nil {
		return "", fmt.Errorf("console of instance %q: asking backend %q: %w", name, backend, err)
	}
	path := st.Details[console.DetailKey]
	if path == "" || !filepath.IsAbs(path) {
		return "", fmt.Errorf("console of instance %q: backend %q keeps no console log: %w", name, backend, errdefs.ErrNotSupported)
	}
	return path, nil
}
