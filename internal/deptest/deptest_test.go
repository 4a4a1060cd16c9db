package deptest

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// mod is the module path; every rule's own packages are under it.
const mod = "github.com/guestlink/guestlink"

// Groups of forbidden dependencies, by what they stand for.
var (
	// server is the daemon's own code: services, transports, store, dashboard.
	server = []string{mod + "/core", mod + "/transport", mod + "/db", mod + "/web"}
	// webStack is the HTTP server and HTML libraries of the API and dashboard.
	webStack = []string{"github.com/gofiber/", "github.com/valyala/fasthttp", "github.com/a-h/templ"}
	// storeStack is the ORM and the database drivers.
	storeStack = []string{"gorm.io/", "github.com/go-gormigrate/", "github.com/glebarez/", "modernc.org/sqlite", "github.com/jackc/"}
	// pluginStack is the plugin host's transport.
	pluginStack = []string{"github.com/hashicorp/go-plugin", "google.golang.org/grpc"}
)

// rule says which dependencies the packages matching pkgs must not have.
// A prefix ending in "/" matches any path that starts with it; any other
// prefix matches the path itself and the paths below it. except lists
// packages that a forbidden prefix would match but that are allowed. skip
// lists packages (prefixes) that pkgs matches but another rule covers.
type rule struct {
	name   string
	pkgs   []string
	forbid []string
	except []string
	skip   []string
}

// rules is every import rule of the module.
var rules = []rule{
	{
		name: "agent and link: nothing of the daemon, the store, the web UI or the CLI",
		pkgs: []string{mod + "/cmd/guestlink-agent", mod + "/agent/...", mod + "/link/..."},
		forbid: concat(server, webStack, storeStack,
			[]string{mod + "/client", mod + "/plugins", "github.com/spf13/cobra"}),
	},
	{
		name:   "SDK: nothing of the daemon, the agent, the store or the web UI",
		pkgs:   []string{mod + "/plugins/sdk/..."},
		forbid: concat(server, webStack, storeStack, []string{mod + "/agent", mod + "/client"}),
	},
	{
		name: "backends and their libraries: only the SDK, shared plugin libraries and link/",
		pkgs: []string{mod + "/plugins/..."},
		forbid: concat(server, webStack, storeStack,
			[]string{mod + "/agent", mod + "/client", mod + "/api", mod + "/cmd", "github.com/spf13/cobra"}),
		skip: []string{mod + "/plugins/fleet"},
	},
	{
		// The fleet's guests run the real agent (and so api/, the agent's
		// wire types) in the backend's process.
		name: "fleet backend: the agent as a library, else what every backend may use",
		pkgs: []string{mod + "/plugins/fleet/..."},
		forbid: concat(server, webStack, storeStack,
			[]string{mod + "/client", mod + "/cmd", "github.com/spf13/cobra"}),
	},
	{
		// Services are reached through transports (transport/..., web/), never
		// the other way round, so a service never links an HTTP server.
		name: "core (services): no transport, no HTTP server, no backend, no client, no composition root",
		pkgs: []string{mod + "/core/..."},
		forbid: concat([]string{mod + "/transport", mod + "/web", mod + "/plugins", mod + "/client", mod + "/daemon",
			mod + "/cmd", mod + "/agent"}, webStack),
		except: []string{mod + "/plugins/sdk"},
	},
	{
		name: "transports: over the services, never the dashboard, a backend, the client or the composition root",
		pkgs: []string{mod + "/transport/..."},
		forbid: []string{mod + "/web", mod + "/plugins", mod + "/client", mod + "/daemon", mod + "/cmd",
			mod + "/agent", "github.com/a-h/templ"},
		except: []string{mod + "/plugins/sdk"},
	},
	{
		name: "devlxd conformance suite: the wire only, nothing of the code it checks",
		pkgs: []string{mod + "/internal/devlxdconf"},
		forbid: concat(server, webStack, storeStack, pluginStack,
			[]string{mod + "/agent", mod + "/link", mod + "/plugins", mod + "/client", mod + "/api"}),
	},
	{
		name:   "store: nothing of core",
		pkgs:   []string{mod + "/db/..."},
		forbid: concat([]string{mod + "/core", mod + "/web", mod + "/plugins", mod + "/client"}, webStack, pluginStack),
	},
	{
		name: "dashboard components: render API wire types, nothing of core, the store or the plugins",
		pkgs: []string{mod + "/web/components/..."},
		forbid: concat([]string{mod + "/core", mod + "/db", mod + "/plugins", mod + "/daemon", mod + "/client"},
			storeStack, pluginStack, []string{"github.com/gofiber/", "github.com/valyala/fasthttp"}),
	},
	{
		name: "console text (web/ansi) and console logs (core/console): small leaves, no server stack",
		pkgs: []string{mod + "/web/ansi", mod + "/core/console"},
		forbid: concat(server, webStack, storeStack, pluginStack,
			[]string{mod + "/plugins", mod + "/client", mod + "/api"}),
		except: []string{mod + "/web/ansi", mod + "/core/console"},
	},
	{
		name: "CLI and client: none of the server (store, plugin host, HTTP server, services)",
		pkgs: []string{mod + "/cmd/guestlink", mod + "/client/..."},
		forbid: concat(server, webStack, storeStack, pluginStack,
			[]string{mod + "/plugins", mod + "/agent"}),
	},
	{
		name: "metrics: only core/metrics (and the composition root) import the Prometheus client",
		pkgs: []string{mod + "/transport/adminapi", mod + "/transport/devlxd", mod + "/core/agentmon", mod + "/core/events",
			mod + "/core/instance", mod + "/core/pluginhost", mod + "/core/linkhost", mod + "/web",
			mod + "/agent/...", mod + "/link/...", mod + "/plugins/...", mod + "/client/...", mod + "/db/..."},
		forbid: []string{"github.com/prometheus/"},
	},
}

// concat joins lists of prefixes.
func concat(lists ...[]string) []string { return slices.Concat(lists...) }

// matches reports whether path is matched by prefix (see rule).
func matches(path, prefix string) bool {
	if strings.HasSuffix(prefix, "/") {
		return strings.HasPrefix(path, prefix)
	}
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

// violations returns the dependencies in deps that r forbids.
func violations(r rule, deps []string) []string {
	var bad []string
	for _, dep := range deps {
		if slices.ContainsFunc(r.except, func(e string) bool { return matches(dep, e) }) {
			continue
		}
		if slices.ContainsFunc(r.forbid, func(f string) bool { return matches(dep, f) }) {
			bad = append(bad, dep)
		}
	}
	return bad
}

// goList runs go list with args and returns the listed packages.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return strings.Fields(string(out))
}

// TestImportRules checks every rule against the module's real dependencies.
func TestImportRules(t *testing.T) {
	for _, r := range rules {
		t.Run(r.name, func(t *testing.T) {
			own := slices.DeleteFunc(goList(t, r.pkgs...), func(p string) bool {
				return slices.ContainsFunc(r.skip, func(s string) bool { return matches(p, s) })
			})
			if len(own) == 0 {
				t.Fatalf("no package matches %q: the rule checks nothing", r.pkgs)
			}
			deps := goList(t, append([]string{"-deps"}, own...)...)
			for _, dep := range violations(r, deps) {
				t.Errorf("%s depends on %s, which the rule forbids", strings.Join(r.pkgs, " "), dep)
			}
		})
	}
}

// TestRulesCatchViolations breaks each kind of rule on purpose: a rule that
// passes on these dependency lists would pass on anything.
func TestRulesCatchViolations(t *testing.T) {
	byName := func(prefix string) rule {
		for _, r := range rules {
			if strings.HasPrefix(r.name, prefix) {
				return r
			}
		}
		t.Fatalf("no rule named %q...", prefix)
		return rule{}
	}
	tests := []struct {
		rule string
		deps []string
		want []string
	}{
		{"CLI", []string{"fmt", mod + "/api", mod + "/client", "gorm.io/gorm", "github.com/hashicorp/go-plugin", mod + "/core/instance"},
			[]string{"gorm.io/gorm", "github.com/hashicorp/go-plugin", mod + "/core/instance"}},
		{"CLI", []string{"google.golang.org/grpc/codes", "github.com/gofiber/fiber/v2", mod + "/db", "github.com/jackc/pgx/v5"},
			[]string{"google.golang.org/grpc/codes", "github.com/gofiber/fiber/v2", mod + "/db", "github.com/jackc/pgx/v5"}},
		{"CLI", []string{mod + "/api", mod + "/errdefs", mod + "/dbx", "github.com/spf13/cobra"}, nil},
		{"agent", []string{mod + "/link/ringline", mod + "/core/status", "github.com/spf13/cobra"},
			[]string{mod + "/core/status", "github.com/spf13/cobra"}},
		{"SDK", []string{"google.golang.org/grpc", mod + "/web/components"}, []string{mod + "/web/components"}},
		{"backends", []string{mod + "/plugins/sdk", mod + "/link/transport", mod + "/db"}, []string{mod + "/db"}},
		{"core", []string{mod + "/plugins/sdk/proto/backend/v1", mod + "/web", mod + "/plugins/sim/simvm", mod + "/daemon"},
			[]string{mod + "/web", mod + "/plugins/sim/simvm", mod + "/daemon"}},
		{"core", []string{mod + "/transport/adminapi", "github.com/gofiber/fiber/v2", "github.com/valyala/fasthttp", mod + "/db"},
			[]string{mod + "/transport/adminapi", "github.com/gofiber/fiber/v2", "github.com/valyala/fasthttp"}},
		{"transports", []string{"github.com/gofiber/fiber/v2", mod + "/core/instance", mod + "/web", mod + "/plugins/qemu"},
			[]string{mod + "/web", mod + "/plugins/qemu"}},
		{"store", []string{mod + "/errdefs", mod + "/core/errdefs"}, []string{mod + "/core/errdefs"}},
		{"dashboard components", []string{"github.com/a-h/templ", mod + "/api", mod + "/core/instance", mod + "/db", mod + "/plugins/sdk"},
			[]string{mod + "/core/instance", mod + "/db", mod + "/plugins/sdk"}},
		{"dashboard components", []string{mod + "/api", mod + "/web/components", "github.com/gofiber/fiber/v2", "gorm.io/gorm"},
			[]string{"github.com/gofiber/fiber/v2", "gorm.io/gorm"}},
	}
	for _, tt := range tests {
		r := byName(tt.rule)
		if got := violations(r, tt.deps); !slices.Equal(got, tt.want) {
			t.Errorf("rule %q on %q: violations %q, want %q", r.name, tt.deps, got, tt.want)
		}
	}
}
