package instance

import (
	"strings"
)

// Instance names are case-insensitive, as DNS names are: Create stores
// them lowercase, lookups find an instance by any case of its name, and a
// name that differs from an existing one only in case is taken.
//
// Instances stored before that rule may have uppercase letters. They keep
// their names (renaming would move a running guest's directories under
// its plugin) and are found by any case too. Two stored names that differ
// only in case each keep answering to their exact name; the lowercase one
// (or the first loaded) also answers to the other cases. The daemon logs
// both at start and says what to do: delete or recreate one of them.

// canonicalName is the form of name that lookups compare.
func canonicalName(name string) string { return strings.ToLower(name) }

// indexNameLocked makes e findable by any case of its name unless another
// instance already is; Manager.mu must be held.
func (m *Manager) indexNameLocked(e *entry) {
	if other := m.byLower[e.lname]; other == nil || (other.name != other.lname && e.name == e.lname) {
		m.byLower[e.lname] = e
	}
}

// unindexNameLocked forgets e's case-insensitive name, handing it to another
// instance of the same name in another case if there is one; Manager.mu
// must be held.
func (m *Manager) unindexNameLocked(e *entry) {
	if m.byLower[e.lname] != e {
		return
	}
	delete(m.byLower, e.lname)
	for _, x := range m.byName {
		if x != e && x.lname == e.lname {
			m.indexNameLocked(x)
		}
	}
}

// findLocked returns the instance called name: the exact name first, then
// any case of it; Manager.mu must be held (read).
func (m *Manager) findLocked(name string) (*entry, bool) {
	if e, ok := m.byName[name]; ok {
		return e, true
	}
	e, ok := m.byLower[canonicalName(name)]
	return e, ok
}

// warnNameCases logs the stored instances whose names are not lowercase:
// each is found by any case, and those whose names differ only in case
// need an administrator's choice. Manager.mu must be held (read).
func (m *Manager) warnNameCasesLocked() {
	for _, e := range m.sorted {
		if e.name == e.lname {
			continue
		}
		if other := m.byLower[e.lname]; other != nil && other != e {
			m.log.Warn("two instances differ only in the case of their names; names are case-insensitive: "+
				"each still answers to its exact name, the other cases reach "+other.name+"; "+
				"delete or recreate one of them under another name",
				"instance", e.name, "other", other.name)
			continue
		}
		m.log.Info("instance name has uppercase letters (stored before names were case-insensitive); "+
			"it is found by any case and keeps its name", "instance", e.name)
	}
}
