package deptest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// wireTagKeys are the struct tag keys of a wire or storage format: a type
// whose fields carry one is a copy for the wire (api/) or a private row
// (db/), not a domain type.
var wireTagKeys = []string{"json", "yaml", "xml", "gorm"}

// wireTagged lists the exported structs of core/ that still carry wire tags
// today, each with the reason; TestDomainTypesCarryNoWireTags fails on any
// other (a new one, or one of these moved elsewhere in its package's
// files), so the list only shrinks. Issue 24's design: the domain owns its
// types with no wire format, the wire types live in api/ and are converted
// at the transport's edge. None is left: a type added here needs a reason
// a reviewer accepts.
var wireTagged = map[string]string{}

// wireTags returns "pkg.Type.Field (json)" for every field of an exported
// struct type in the Go files src (file name to source) that carries a tag
// of wireTagKeys, nested struct types included.
func wireTags(t *testing.T, pkg string, src map[string]string) []string {
	t.Helper()
	fset := token.NewFileSet()
	var out []string
	for name, text := range src {
		f, err := parser.ParseFile(fset, name, text, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parsing %s: %v", name, err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, s := range gd.Specs {
				ts := s.(*ast.TypeSpec)
				st, ok := ts.Type.(*ast.StructType)
				if !ok || !ts.Name.IsExported() {
					continue
				}
				ast.Inspect(st, func(n ast.Node) bool {
					fl, ok := n.(*ast.Field)
					if !ok || fl.Tag == nil {
						return true
					}
					tag := reflect.StructTag(strings.Trim(fl.Tag.Value, "`"))
					for _, k := range wireTagKeys {
						if _, ok := tag.Lookup(k); ok {
							field := "(embedded)"
							if len(fl.Names) > 0 {
								field = fl.Names[0].Name
							}
							out = append(out, pkg+"."+ts.Name.Name+"."+field+" ("+k+")")
						}
					}
					return true
				})
			}
		}
	}
	slices.Sort(out)
	return out
}

// typeOf returns "pkg.Type" of a wireTags line.
func typeOf(line string) string {
	dot := strings.LastIndex(line[:strings.Index(line, " ")], ".")
	return line[:dot]
}

// TestDomainTypesCarryNoWireTags reads every package under core/ and fails
// on an exported struct whose fields carry a json, yaml, xml or gorm tag,
// but the ones wireTagged names with a reason: the domain's types have no
// wire format (the instance view lost its tags when the members' wire
// moved to api.Instance, core/cluster/wire.go).
func TestDomainTypesCarryNoWireTags(t *testing.T) {
	seen := map[string]bool{}
	for _, line := range goList(t, "-f", `{{.ImportPath}} {{.Dir}} {{join .GoFiles " "}}`, mod+"/core/...") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		pkg := strings.TrimPrefix(fields[0], mod+"/")
		src := map[string]string{}
		for _, f := range fields[2:] {
			b, err := os.ReadFile(filepath.Join(fields[1], f))
			if err != nil {
				t.Fatal(err)
			}
			src[f] = string(b)
		}
		for _, v := range wireTags(t, pkg, src) {
			typ := typeOf(v)
			if _, ok := wireTagged[typ]; ok {
				seen[typ] = true
				continue
			}
			t.Errorf("%s: a domain type carries a wire tag; put the wire form in api/ (or a private row in db/) and convert at the edge (docs/architecture.md, \"Import rules\")", v)
		}
	}
	for typ := range wireTagged {
		if !seen[typ] {
			t.Errorf("wireTagged names %s, which carries no wire tag now (or no longer exists): remove it from the list", typ)
		}
	}
}

// TestWireTagsCatchesABreak feeds the check a deliberate break: the
// instance view with its old JSON tags back, a nested struct, and the
// forms that must pass (unexported types, other tag keys).
func TestWireTagsCatchesABreak(t *testing.T) {
	src := map[string]string{"types.go": "package instance\n" +
		"type Instance struct {\n\tName string `json:\"name\"`\n\tUUID string\n}\n" +
		"type Outer struct {\n\tIn struct {\n\t\tX int `yaml:\"x\"`\n\t}\n}\n" +
		"type row struct {\n\tID int `gorm:\"primaryKey\"`\n}\n" +
		"type Flags struct {\n\tDebug bool `flag:\"debug\"`\n}\n"}
	got := wireTags(t, "core/instance", src)
	want := []string{"core/instance.Instance.Name (json)", "core/instance.Outer.X (yaml)"}
	if !slices.Equal(got, want) {
		t.Fatalf("wireTags = %q, want %q", got, want)
	}
	if _, ok := wireTagged[typeOf(got[0])]; ok {
		t.Fatalf("the instance view is in wireTagged: the break would pass")
	}
}
