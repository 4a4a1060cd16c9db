package devlxdconf

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"
)

// lxdTypesText is LXD's devlxd types as recorded in the repository: the
// field order and omitempty of each (testdata/lxd_types.txt).
//
//go:embed testdata/lxd_types.txt
var lxdTypesText string

// lxdField is one JSON field of an LXD type.
type lxdField struct {
	name      string
	omitEmpty bool
}

// lxdTypes is lxdTypesText parsed.
var lxdTypes = mustParseTypes(lxdTypesText)

func mustParseTypes(text string) map[string][]lxdField {
	types, err := parseTypes(text)
	if err != nil {
		panic(fmt.Sprintf("devlxdconf: testdata/lxd_types.txt: %v", err))
	}
	return types
}

// parseTypes reads the lines of lxd_types.txt: "Type field field? ...T"
// ('#' starts a comment line); an embedded type must be defined above the
// line that embeds it.
func parseTypes(text string) (map[string][]lxdField, error) {
	types := map[string][]lxdField{}
	for i, line := range strings.Split(text, "\n") {
		words := strings.Fields(line)
		if len(words) == 0 || strings.HasPrefix(words[0], "#") {
			continue
		}
		name := words[0]
		if _, dup := types[name]; dup {
			return nil, fmt.Errorf("line %d: type %s defined twice", i+1, name)
		}
		fields := []lxdField{}
		seen := map[string]bool{}
		add := func(f lxdField) error {
			if seen[f.name] {
				return fmt.Errorf("line %d: type %s has field %q twice", i+1, name, f.name)
			}
			seen[f.name] = true
			fields = append(fields, f)
			return nil
		}
		for _, w := range words[1:] {
			if emb, ok := strings.CutPrefix(w, "..."); ok {
				inner, ok := types[emb]
				if !ok {
					return nil, fmt.Errorf("line %d: type %s embeds %s, not defined above", i+1, name, emb)
				}
				for _, f := range inner {
					if err := add(f); err != nil {
						return nil, err
					}
				}
				continue
			}
			f := lxdField{name: strings.TrimSuffix(w, "?"), omitEmpty: strings.HasSuffix(w, "?")}
			if f.name == "" {
				return nil, fmt.Errorf("line %d: type %s has an empty field name", i+1, name)
			}
			if err := add(f); err != nil {
				return nil, err
			}
		}
		types[name] = fields
	}
	return types, nil
}

// LXDObject returns the JSON object LXD writes for a value of its type typ
// (a name in testdata/lxd_types.txt) whose fields have the JSON texts in
// values: the fields in LXD's order, an omitempty field left out when its
// value is empty ("", null, 0, false, "", [] or {}), compact as LXD's
// encoder writes it. It panics when values lacks a field the type always
// writes or names one the type does not have: the suite's expectations and
// the record of LXD's types must agree.
func LXDObject(typ string, values map[string]string) string {
	fields, ok := lxdTypes[typ]
	if !ok {
		panic(fmt.Sprintf("devlxdconf: LXD type %s is not recorded in testdata/lxd_types.txt", typ))
	}
	known := map[string]bool{}
	var b strings.Builder
	b.WriteByte('{')
	for _, f := range fields {
		known[f.name] = true
		v, ok := values[f.name]
		if f.omitEmpty && isEmptyJSON(v) {
			continue
		}
		if !ok {
			panic(fmt.Sprintf("devlxdconf: LXD type %s: no value for field %q", typ, f.name))
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:%s", f.name, v)
	}
	for k := range values {
		if !known[k] {
			panic(fmt.Sprintf("devlxdconf: LXD type %s has no field %q", typ, k))
		}
	}
	b.WriteByte('}')
	return b.String()
}

// isEmptyJSON reports whether v is the JSON text of a value encoding/json
// leaves out of an omitempty field (or no value at all).
func isEmptyJSON(v string) bool {
	switch v {
	case "", "null", "0", "false", `""`, "[]", "{}":
		return true
	}
	return false
}

// Info returns LXD's GET /1.0 body for an untrusted caller of guest g in
// the given state, with no storage drivers (DevLXDGetUntrusted).
func Info(g Guest, state string) string {
	return LXDObject("DevLXDGetUntrusted", infoFields(g, state, "untrusted"))
}

// TrustedInfo returns LXD's GET /1.0 body for a trusted caller
// (DevLXDGet): Info's fields, "auth":"trusted" and the environment of a
// host that is not clustered.
func TrustedInfo(g Guest, state string) string {
	v := infoFields(g, state, "trusted")
	v["environment"] = LXDObject("DevLXDServerEnvironment", map[string]string{"server_clustered": "false"})
	return LXDObject("DevLXDGet", v)
}

func infoFields(g Guest, state, auth string) map[string]string {
	return map[string]string{
		"state":                     jsonString(state),
		"api_version":               `"1.0"`,
		"instance_type":             jsonString(g.InstanceType),
		"location":                  jsonString(g.Location),
		"auth":                      jsonString(auth),
		"supported_storage_drivers": storageDrivers(g.StorageDrivers),
	}
}

// storageDrivers is LXD's list of driver objects for the local drivers
// names.
func storageDrivers(names []string) string {
	objs := make([]string, len(names))
	for i, n := range names {
		objs[i] = LXDObject("DevLXDServerStorageDriverInfo", map[string]string{"name": jsonString(n), "remote": "false"})
	}
	return "[" + strings.Join(objs, ",") + "]"
}

// jsonString is s as a JSON string, without HTML escaping (as LXD writes).
func jsonString(s string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}
