package components

import (
	"strings"
	"testing"

	"github.com/guestlink/guestlink/api"
)

// TestSnapshotList renders the instance page's snapshot list: empty, and
// with a stateless and a stateful snapshot (Ready, legacy layout).
func TestSnapshotList(t *testing.T) {
	for _, tc := range []struct {
		name  string
		snaps []api.InstanceSnapshot
		want  map[string]string // data-snapshot -> text it must contain ("" key: the list's text)
	}{
		{"empty", nil, map[string]string{"": "No snapshots."}},
		{"two", []api.InstanceSnapshot{
			{Name: "s0", CreatedAt: now},
			{Name: "before-upgrade", CreatedAt: now, Stateful: true, Ready: true, Details: map[string]string{"layout": "legacy"}},
		}, map[string]string{
			"s0":             "2026-11-22 01:00:00 UTC · stateless",
			"before-upgrade": "stateful · Ready when taken · legacy layout",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := render(t, SnapshotList(tc.snaps))
			list := doc.Find(`[data-testid="snapshots"]`)
			if list.Length() != 1 {
				t.Fatal("no snapshot list")
			}
			if n := list.Find("[data-snapshot]").Length(); n != len(tc.snaps) {
				t.Errorf("%d snapshot rows, want %d", n, len(tc.snaps))
			}
			for key, want := range tc.want {
				sel := list
				if key != "" {
					sel = list.Find(`[data-snapshot="` + key + `"]`)
				}
				if got := strings.Join(strings.Fields(sel.Text()), " "); !strings.Contains(got, want) {
					t.Errorf("%q: text %q does not contain %q", key, got, want)
				}
			}
		})
	}
	page := render(t, InstancePage(InstanceData{Meta: Meta{Now: now}, Inst: inst("vm1", "Stopped", ""),
		Snapshots: []api.InstanceSnapshot{{Name: "s0", CreatedAt: now}}}))
	if page.Find(`[data-snapshot="s0"]`).Length() != 1 {
		t.Error("the instance page does not list the snapshot")
	}
}
