package deptest

import (
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// mod is the module path; every rule's own packages are under it.
const mod = "github.com/guestlink/guestlink"

// deps is a set of packages a rule names, with the words the docs use
// for it. A prefix ending in "/" matches any path that starts with it;
// any other prefix matches the path itself and the paths below it. match,
// if set, matches more paths (a set no prefix can describe).
type deps struct {
	label    string
	prefixes []string
	match    func(path string) bool
}

// has reports whether path is in d.
func (d deps) has(path string) bool {
	return slices.ContainsFunc(d.prefixes, func(p string) bool { return matches(path, p) }) ||
		d.match != nil && d.match(path)
}

// own returns one set per package of this module, named by its path in
// the repository (rel, e.g. "core").
func own(rel ...string) []deps {
	var ds []deps
	for _, r := range rel {
		ds = append(ds, deps{label: "`" + r + "`", prefixes: []string{mod + "/" + r}})
	}
	return ds
}

// Sets of forbidden dependencies, by what they stand for.
var (
	// server is the daemon's own code: services, transports, store, dashboard.
	server = own("core", "transport", "db", "web")
	// webStack is the HTTP server and HTML libraries of the API and dashboard.
	webStack = deps{"fiber, fasthttp, templ", []string{"github.com/gofiber/", "github.com/valyala/fasthttp", "github.com/a-h/templ"}, nil}
	// httpServer is the HTTP server alone.
	httpServer = deps{"fiber, fasthttp", []string{"github.com/gofiber/", "github.com/valyala/fasthttp"}, nil}
	// templ is the HTML component library.
	templ = deps{"templ", []string{"github.com/a-h/templ"}, nil}
	// storeStack is the ORM and the database drivers.
	storeStack = deps{"gorm and the SQL drivers", []string{"gorm.io/", "github.com/go-gormigrate/", "github.com/glebarez/", "modernc.org/sqlite", "github.com/jackc/"}, nil}
	// pluginStack is the plugin host's transport.
	pluginStack = deps{"go-plugin, gRPC", []string{"github.com/hashicorp/go-plugin", "google.golang.org/grpc"}, nil}
	// rpcStack is the plugin contract's transport: gRPC, go-plugin and the
	// generated protobuf code of the contract's wire form.
	rpcStack = deps{"gRPC, go-plugin, the contract's wire form (`plugins/sdk/proto`)",
		[]string{"google.golang.org/grpc", "github.com/hashicorp/go-plugin", mod + "/plugins/sdk/proto"}, nil}
	// protobufRuntime is the protobuf runtime (both module paths).
	protobufRuntime = deps{"the protobuf runtime", []string{"google.golang.org/protobuf", "github.com/golang/protobuf"}, nil}
	// cobra is the CLI's command library.
	cobra = deps{"cobra", []string{"github.com/spf13/cobra"}, nil}
	// prometheus is the metrics client.
	prometheus = deps{"the Prometheus client", []string{"github.com/prometheus/"}, nil}
	// testKits are the packages that exist for tests: the SDK's mock,
	// conformance kit, example backend and misbehaving plugin, and every
	// package of this module named *test (apitest, dbtest, imagetest, ...).
	testKits = deps{"test kits (`plugins/sdk/sdktest`, `plugins/sdk/conformance`, `plugins/sdk/example`, `plugins/sdk/internal`, any `*test` package)",
		[]string{mod + "/plugins/sdk/sdktest", mod + "/plugins/sdk/conformance", mod + "/plugins/sdk/example", mod + "/plugins/sdk/internal"},
		func(p string) bool {
			return (p == mod || strings.HasPrefix(p, mod+"/")) && strings.HasSuffix(p[strings.LastIndex(p, "/")+1:], "test")
		}}
	// testHelpers are the test helpers under internal/: gates, process
	// groups, waits, leak checks, certificates, binaries built for tests.
	testHelpers = deps{"the test helpers (`internal/testenv`, `testproc`, `testwait`, `testbin`, `testcert`, `leakcheck`)",
		[]string{mod + "/internal/testenv", mod + "/internal/testproc", mod + "/internal/testwait", mod + "/internal/testbin",
			mod + "/internal/testcert", mod + "/internal/leakcheck"}, nil}
	// nonStandard is anything outside Go's standard library.
	nonStandard = deps{"anything outside the standard library", nil, func(p string) bool { return !standard(p) }}
)

// The layers of core/ (the services), bottom up. A package is in exactly
// one; TestCoreLayered fails on a core package in none. Their rules check
// direct imports: a path from one core package to another runs through
// core packages, each held by its own layer's rule, or through db, the
// adapter that imports the domains it implements (storeDomains), which
// a service still on db must not count as its own import.
var (
	// coreLeaves import no other core package.
	coreLeaves = []string{"core/cloudinit", "core/console", "core/events", "core/images", "core/listener",
		"core/membership", "core/oomkill", "core/pki", "core/redact", "core/statebudget", "core/status", "core/storage"}
	// coreLinkHost is over core/listener only.
	coreLinkHost = []string{"core/linkhost"}
	// coreInstance is over the leaves; its own record package (the
	// instance's stored types and store interfaces) is a leaf below it.
	coreInstance = []string{"core/instance"}
	// instanceDomain are the types and store interfaces db implements for
	// the instance side: what core/instance and core/events own.
	instanceDomain = []string{"core/events", "core/instance/record"}
	// instanceServices program against instanceDomain's interfaces.
	instanceServices = []string{"core/instance", "core/events", "core/agentmon", "core/guestview", "core/metrics"}
	// coreOverInstance are over core/instance and the leaves.
	coreOverInstance = []string{"core/auth", "core/guestview"}
	// coreTops are imported by no core package: the composition root wires them.
	coreTops = []string{"core/agentmon", "core/cluster", "core/metrics", "core/oomwatch"}
)

// storeDomains are the core packages whose types and Store interfaces db
// implements (the adapter imports the domain, as containerd's metadata
// imports core/containers); db may import them and nothing else of core.
var storeDomains = []string{"core/auth", "core/images", "core/membership", "core/storage"}

// backquoted returns each of rel in backquotes, as the docs name packages.
func backquoted(rel []string) []string {
	out := make([]string, len(rel))
	for i, r := range rel {
		out[i] = "`" + r + "`"
	}
	return out
}

// paths returns the full import paths of rel (paths in the repository);
// with tree, each is the pattern for the package and those below it.
func paths(tree bool, rel ...string) []string {
	var ps []string
	for _, r := range rel {
		p := mod + "/" + r
		if tree {
			p += "/..."
		}
		ps = append(ps, p)
	}
	return ps
}

// rule says which dependencies the packages matching pkgs must not have,
// and why. Each of pkgs' packages is checked with its own dependencies
// (all of them, or only its direct imports when direct is set), so a
// package is never its own violation. except lists paths (prefixes, as in
// deps) that forbid would match but that are allowed. skip names packages
// (prefixes) that pkgs matches but another rule covers.
type rule struct {
	name   string // short and unique: TestRulesCatchViolations breaks each by name
	pkgs   []string
	forbid []deps
	except []string
	skip   []deps
	direct bool
	reason string // said by every failure and in docs/architecture.md
	// exceptLabel, if set, names except in docs/architecture.md.
	exceptLabel string
}

// rules is every import rule of the module.
var rules = []rule{
	{
		name:   "agent",
		pkgs:   []string{mod + "/cmd/guestlink-agent", mod + "/agent/...", mod + "/link/..."},
		forbid: slices.Concat(server, own("client", "plugins"), []deps{webStack, storeStack, pluginStack, cobra}),
		reason: "the agent runs in every guest as a small static binary, and link/ is shared by the agent, the daemon and the backends",
	},
	{
		name:   "sdk",
		pkgs:   []string{mod + "/plugins/sdk/..."},
		forbid: slices.Concat(server, own("agent", "client", "api", "daemon", "cmd"), []deps{webStack, storeStack}),
		reason: "plugin authors outside this repository import the SDK: everything it links they link and must require",
	},
	{
		name:   "backends",
		pkgs:   []string{mod + "/plugins/..."},
		forbid: slices.Concat(server, own("agent", "client", "api", "cmd", "daemon"), []deps{webStack, storeStack, cobra}),
		skip:   []deps{{"`plugins/fleet`, `plugins/pluginhost` (their own rules)", []string{mod + "/plugins/fleet", mod + "/plugins/pluginhost"}, nil}},
		reason: "a backend is its own process that talks to the daemon only through the plugin contract: only the SDK, shared plugin libraries and link/",
	},
	{
		name:   "fleet",
		pkgs:   []string{mod + "/plugins/fleet/..."},
		forbid: slices.Concat(server, own("client", "cmd", "daemon"), []deps{webStack, storeStack, cobra}),
		reason: "the fleet's guests run the real agent (and so api/, the agent's wire types) in the backend's process; else it is a backend like the others",
	},
	{
		name:   "plugin host",
		pkgs:   []string{mod + "/plugins/pluginhost/..."},
		forbid: slices.Concat(server, own("plugins", "agent", "client", "api", "cmd", "daemon"), []deps{webStack, storeStack, cobra}),
		except: []string{mod + "/plugins/sdk"},
		reason: "the daemon's side of the plugin protocol carries the contract over gRPC to the plugin processes and knows nothing of the services: they reach it through interfaces they declare, which the composition root fills with it",
	},
	{
		name:   "core",
		pkgs:   []string{mod + "/core/..."},
		forbid: slices.Concat(own("transport", "web", "plugins", "client", "daemon", "cmd", "agent"), []deps{webStack}),
		except: []string{mod + "/plugins/sdk/contract", mod + "/plugins/sdk/hostfwd"},
		reason: "services are reached through transports, never the other way round, so a service never links an HTTP server and any transport can use it",
	},
	{
		name:   "transports",
		pkgs:   []string{mod + "/transport/..."},
		forbid: slices.Concat(own("web", "plugins", "client", "daemon", "cmd", "agent"), []deps{templ}),
		except: []string{mod + "/plugins/sdk", mod + "/plugins/pluginhost"},
		reason: "a transport turns requests into calls on the services; the dashboard is a transport beside it, backends are other processes and only the composition root knows every part",
	},
	{
		name:   "dashboard",
		pkgs:   []string{mod + "/web"},
		forbid: own("transport", "plugins", "client", "daemon", "cmd", "agent"),
		except: []string{mod + "/plugins/sdk", mod + "/plugins/pluginhost"},
		reason: "the dashboard is a transport like transport/...: it calls the services, never another transport, a backend or the composition root",
	},
	{
		name:   "dashboard store",
		pkgs:   []string{mod + "/web/..."},
		forbid: slices.Concat(own("db"), []deps{storeStack}),
		direct: true,
		reason: "the dashboard reads and writes through the services, whose checks a handler opening the store would skip (directly: the services themselves still use db)",
	},
	{
		name: "test kits",
		pkgs: []string{mod + "/core/...", mod + "/transport/...", mod + "/daemon/...", mod + "/web/...", mod + "/db/...",
			mod + "/cmd/...", mod + "/client/...", mod + "/agent/...", mod + "/link/...", mod + "/plugins/pluginhost/..."},
		forbid: []deps{testKits, testHelpers},
		skip:   []deps{{"test kits themselves", nil, testKits.has}},
		reason: "mocks, the conformance kit, the example backend and test helpers exist for tests; in non-test code they would ship a fake backend or testing code in a binary",
	},
	{
		name:   "devlxd conformance",
		pkgs:   []string{mod + "/internal/devlxdconf"},
		forbid: slices.Concat(server, own("agent", "link", "plugins", "client", "api"), []deps{webStack, storeStack, pluginStack}),
		reason: "the conformance suite judges devlxd from the wire, as LXD's clients do; importing the code it checks would let that code define its own test",
	},
	{
		name:        "store",
		pkgs:        []string{mod + "/db/..."},
		forbid:      slices.Concat(own("core", "transport", "web", "plugins", "client"), []deps{webStack, pluginStack}),
		except:      paths(false, slices.Concat(instanceDomain, storeDomains)...),
		exceptLabel: "the domain packages it implements the stores of (" + strings.Join(backquoted(slices.Concat(instanceDomain, storeDomains)), ", ") + ")",
		reason:      "the services use the store, never the other way round: the store is tested and replaced alone; it imports only the domain packages whose store interfaces it implements (the adapter, as containerd's core/metadata)",
	},
	{
		name:   "instance domain",
		pkgs:   paths(true, instanceDomain...),
		forbid: slices.Concat(own("db"), []deps{storeStack}),
		reason: "the instance's and the event log's types and store interfaces belong to the domain: db implements them and converts to its private gorm models, so no service sees a gorm type or error and any store (a fake for a unit) fits",
	},
	{
		name:   "instance services",
		pkgs:   paths(true, instanceServices...),
		forbid: slices.Concat(own("db"), []deps{storeStack}),
		reason: "the instance service and those over it program against record.Store and events.EventStore; only the composition root wires db's store in",
	},
	{
		name:   "dashboard components",
		pkgs:   []string{mod + "/web/components/..."},
		forbid: slices.Concat(own("core", "transport", "db", "plugins", "daemon", "client"), []deps{storeStack, pluginStack, httpServer}),
		reason: "components render API wire types, so a test renders a page from plain values; the web handlers convert and hold the fiber code",
	},
	{
		name:   "console text",
		pkgs:   []string{mod + "/web/ansi", mod + "/core/console"},
		forbid: slices.Concat(server, own("plugins", "client", "api"), []deps{webStack, storeStack, pluginStack}),
		reason: "turning console bytes into text and keeping console logs are small leaves both the dashboard and the API use; they need no server",
	},
	{
		name:   "CLI",
		pkgs:   []string{mod + "/cmd/guestlink", mod + "/client/..."},
		forbid: slices.Concat(server, own("plugins", "agent"), []deps{webStack, storeStack, pluginStack}),
		reason: "the CLI runs where no daemon does and links wire types and a client only (33 MB with the server, 14 MB without)",
	},
	{
		name: "metrics",
		pkgs: []string{mod + "/transport/adminapi", mod + "/transport/devlxd", mod + "/core/agentmon", mod + "/core/events",
			mod + "/core/instance", mod + "/core/linkhost", mod + "/web",
			mod + "/agent/...", mod + "/link/...", mod + "/plugins/...", mod + "/client/...", mod + "/db/..."},
		forbid: []deps{prometheus},
		reason: "only core/metrics (and the composition root) import the Prometheus client; the others report through small observer interfaces, testable without a registry",
	},
	{
		name:   "api",
		pkgs:   []string{mod + "/api/..."},
		forbid: []deps{nonStandard},
		except: []string{mod + "/api"},
		reason: "clients import the wire types, so they link nothing else: api/go.mod requires nothing, and no third-party module either",
	},
	{
		name:   "errdefs",
		pkgs:   []string{mod + "/errdefs/..."},
		forbid: []deps{nonStandard},
		reason: "every layer, the CLI and the store included, imports the error kinds: whatever errdefs imports, every binary links",
	},
	{
		name:   "core leaves",
		pkgs:   paths(true, coreLeaves...),
		forbid: own("core"),
		reason: "the building blocks the other services compose each stand alone, tested and reused alone; an import between two is a tangle nobody planned",
	},
	{
		name:   "core/linkhost",
		pkgs:   paths(true, coreLinkHost...),
		forbid: own("core"),
		except: paths(false, "core/listener"),
		direct: true,
		reason: "the daemon's side of the guest link needs only how to listen; the agent monitor builds on it, not the other way round",
	},
	{
		name:        "core/instance",
		pkgs:        paths(true, coreInstance...),
		forbid:      own("core"),
		except:      paths(false, append(slices.Clone(coreLeaves), "core/instance/record")...),
		exceptLabel: "the core leaves, its own `core/instance/record`",
		reason:      "the instance service is what auth, the guest view, the agent monitor, the cluster and metrics build on, so it uses only the leaves (core/events is one: events never know instances)",
	},
	{
		name:        "core over instance",
		pkgs:        paths(true, coreOverInstance...),
		forbid:      own("core"),
		except:      paths(false, slices.Concat(coreLeaves, coreInstance)...),
		exceptLabel: "the core leaves, `core/instance`",
		direct:      true,
		reason:      "auth and the guest view answer questions about instances; the cluster and the agent monitor use them, not the other way round",
	},
	{
		name:   "auth, images, storage, membership stores",
		pkgs:   paths(true, "core/auth", "core/images", "core/storage", "core/membership"),
		forbid: slices.Concat(own("db"), []deps{storeStack, pluginStack, webStack}),
		reason: "these domains own their types and Store interfaces and db implements them (containerd's core/containers and core/metadata): a service reaching db, gorm or a driver would test gorm's errors and be tested only on a database",
	},
	{
		name:   "cluster store",
		pkgs:   paths(true, "core/cluster"),
		forbid: slices.Concat(own("db"), []deps{storeStack}),
		reason: "the cluster's records and lease are core/membership's and its stored instances come through its Store, filled by the composition root",
	},
	{
		name:   "services without the store",
		pkgs:   []string{mod + "/core/..."},
		forbid: slices.Concat(own("db"), []deps{storeStack}),
		reason: "every service owns its types and programs against the store interfaces it declares; only the composition root (daemon/) links db, gorm and the SQL drivers, so a service is tested and reasoned about without a database engine",
	},
	{
		name:   "core tops",
		pkgs:   []string{mod + "/core/..."},
		forbid: own(coreTops...),
		reason: "cluster membership, the agent monitor and metrics are wired in by the composition root; a service that needs one declares a small interface the root fills",
	},
	{
		name:   "services without gRPC",
		pkgs:   []string{mod + "/core/..."},
		forbid: []deps{rpcStack},
		reason: "the services program against the plugin contract's plain Go types (plugins/sdk/contract); the gRPC that carries it to the plugin processes is plugins/pluginhost's, which the composition root hands them through interfaces they declare, so a service is built, tested and reused without it",
	},
	{
		name:   "services without protobuf",
		pkgs:   []string{mod + "/core/..."},
		forbid: []deps{protobufRuntime},
		skip:   []deps{{"`core/metrics` (the Prometheus client it exports through links the protobuf runtime for its exposition format)", []string{mod + "/core/metrics"}, nil}},
		reason: "the plugin contract's wire form is protobuf: a service that links the runtime has taken a wire type in where a plain one belongs (only core/metrics links it, through the Prometheus client)",
	},
	{
		name:   "contract without gRPC",
		pkgs:   []string{mod + "/plugins/sdk/contract/..."},
		forbid: []deps{nonStandard},
		reason: "the plugin contract's plain Go types are what the services import in place of the SDK: whatever the contract links, every service links, so it stays on the standard library (no gRPC, protobuf or go-plugin)",
	},
}

// matches reports whether path is matched by prefix (see deps).
func matches(path, prefix string) bool {
	if strings.HasSuffix(prefix, "/") {
		return strings.HasPrefix(path, prefix)
	}
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

// violations returns the dependencies in ds that r forbids.
func violations(r rule, ds []string) []string {
	var bad []string
	for _, dep := range ds {
		if slices.ContainsFunc(r.except, func(e string) bool { return matches(dep, e) }) {
			continue
		}
		if slices.ContainsFunc(r.forbid, func(f deps) bool { return f.has(dep) }) {
			bad = append(bad, dep)
		}
	}
	return bad
}

// goList runs go list with args in the root module and returns its lines.
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
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// depsOf returns, for each package matching r.pkgs but not r.skip, the
// dependencies r checks: all of them, or its imports when r.direct.
func depsOf(t *testing.T, r rule) map[string][]string {
	t.Helper()
	field := ".Deps"
	if r.direct {
		field = ".Imports"
	}
	got := map[string][]string{}
	for _, line := range goList(t, append([]string{"-f", "{{.ImportPath}} {{join " + field + " \" \"}}"}, r.pkgs...)...) {
		fields := strings.Fields(line)
		if len(fields) == 0 || slices.ContainsFunc(r.skip, func(s deps) bool { return s.has(fields[0]) }) {
			continue
		}
		got[fields[0]] = fields[1:]
	}
	return got
}

// check returns what r reports on the module's real dependencies, one
// message per forbidden dependency of each package, each with the rule's
// reason.
func check(t *testing.T, r rule) []string {
	t.Helper()
	pkgDeps := depsOf(t, r)
	if len(pkgDeps) == 0 {
		t.Fatalf("no package matches %q: rule %q checks nothing", r.pkgs, r.name)
	}
	how := "through its dependencies"
	if r.direct {
		how = "directly"
	}
	var msgs []string
	for _, pkg := range slices.Sorted(maps.Keys(pkgDeps)) {
		for _, dep := range violations(r, pkgDeps[pkg]) {
			msgs = append(msgs, fmt.Sprintf("%s depends on %s (%s), which rule %q forbids: %s", pkg, dep, how, r.name, r.reason))
		}
	}
	return msgs
}

// TestImportRules checks every rule against the module's real dependencies.
func TestImportRules(t *testing.T) {
	for _, r := range rules {
		t.Run(r.name, func(t *testing.T) {
			for _, msg := range check(t, r) {
				t.Error(msg)
			}
		})
	}
}

// TestRulesHaveReasons checks that every rule says why, under a name of
// its own.
func TestRulesHaveReasons(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range rules {
		if r.name == "" || seen[r.name] {
			t.Errorf("rule %q: names must be set and unique", r.name)
		}
		seen[r.name] = true
		if len(r.reason) < 20 {
			t.Errorf("rule %q has no reason (%q): a failure must say why the import is forbidden", r.name, r.reason)
		}
		if len(r.pkgs) == 0 || len(r.forbid) == 0 {
			t.Errorf("rule %q names no packages or forbids nothing", r.name)
		}
	}
}

// TestCoreLayered checks that every package under core/ sits in one layer
// of the services' order (coreLeaves ... coreTops), so a new service is
// placed on purpose, not left out of the order.
func TestCoreLayered(t *testing.T) {
	layers := slices.Concat(coreLeaves, coreLinkHost, coreInstance, coreOverInstance, coreTops)
	for _, p := range goList(t, mod+"/core/...") {
		var in []string
		for _, l := range layers {
			if matches(p, mod+"/"+l) {
				in = append(in, l)
			}
		}
		if len(in) != 1 {
			t.Errorf("%s is in layers %q of core/, want exactly one: add it to one of coreLeaves, coreLinkHost, coreInstance, coreOverInstance, coreTops in internal/deptest and say why in the rule", p, in)
		}
	}
}

// breaks feeds each rule a deliberate break: a dependency list the rule
// must reject (want: what it reports), and lists it must accept (want
// nil). TestRulesCatchViolations runs them; every rule has at least one
// break, or a rule that passes on anything would go unnoticed.
var breaks = []struct {
	rule string
	deps []string
	want []string
}{
	{"agent", []string{mod + "/link/ringline", mod + "/core/status", "github.com/spf13/cobra"},
		[]string{mod + "/core/status", "github.com/spf13/cobra"}},
	{"agent", []string{"google.golang.org/grpc", mod + "/plugins/sdk", mod + "/api", "github.com/mdlayher/vsock"},
		[]string{"google.golang.org/grpc", mod + "/plugins/sdk"}},
	{"sdk", []string{"google.golang.org/grpc", mod + "/web/components", mod + "/api"},
		[]string{mod + "/web/components", mod + "/api"}},
	{"backends", []string{mod + "/plugins/sdk", mod + "/link/transport", mod + "/db", mod + "/agent"},
		[]string{mod + "/db", mod + "/agent"}},
	{"fleet", []string{mod + "/agent", mod + "/api", mod + "/core/instance", "github.com/spf13/cobra"},
		[]string{mod + "/core/instance", "github.com/spf13/cobra"}},
	{"plugin host", []string{mod + "/plugins/sdk", "google.golang.org/grpc", mod + "/errdefs", mod + "/core/instance", mod + "/plugins/sim/simbackend", mod + "/daemon"},
		[]string{mod + "/core/instance", mod + "/plugins/sim/simbackend", mod + "/daemon"}},
	{"core", []string{mod + "/plugins/sdk/proto/backend/v1", mod + "/web", mod + "/plugins/sim/simvm", mod + "/daemon"},
		[]string{mod + "/plugins/sdk/proto/backend/v1", mod + "/web", mod + "/plugins/sim/simvm", mod + "/daemon"}},
	{"core", []string{mod + "/plugins/sdk/contract", mod + "/plugins/sdk/hostfwd", mod + "/plugins/sdk", mod + "/plugins/pluginhost", mod + "/plugins/sdk/eventer"},
		[]string{mod + "/plugins/sdk", mod + "/plugins/pluginhost", mod + "/plugins/sdk/eventer"}},
	{"core", []string{mod + "/transport/adminapi", "github.com/gofiber/fiber/v2", "github.com/valyala/fasthttp", mod + "/db"},
		[]string{mod + "/transport/adminapi", "github.com/gofiber/fiber/v2", "github.com/valyala/fasthttp"}},
	{"transports", []string{"github.com/gofiber/fiber/v2", mod + "/core/instance", mod + "/web", mod + "/plugins/qemu"},
		[]string{mod + "/web", mod + "/plugins/qemu"}},
	{"dashboard", []string{mod + "/core/instance", mod + "/transport/adminapi", mod + "/plugins/sdk", mod + "/plugins/sim", mod + "/daemon"},
		[]string{mod + "/transport/adminapi", mod + "/plugins/sim", mod + "/daemon"}},
	{"dashboard store", []string{mod + "/core/instance", mod + "/db", "gorm.io/gorm"}, []string{mod + "/db", "gorm.io/gorm"}},
	// The holes the SDK's prefix left: its mock, kit and example are
	// under plugins/sdk, which core and the transports may import.
	{"test kits", []string{mod + "/plugins/sdk", mod + "/plugins/sdk/hostfwd", mod + "/plugins/sdk/sdktest", mod + "/plugins/sdk/conformance",
		mod + "/plugins/sdk/example", mod + "/plugins/sdk/internal/misbehaving"},
		[]string{mod + "/plugins/sdk/sdktest", mod + "/plugins/sdk/conformance", mod + "/plugins/sdk/example", mod + "/plugins/sdk/internal/misbehaving"}},
	{"test kits", []string{mod + "/db", mod + "/db/dbtest", mod + "/transport/adminapi/apitest", mod + "/internal/testenv", "net/http/httptest",
		mod + "/internal/testwait", mod + "/internal/statelock"},
		[]string{mod + "/db/dbtest", mod + "/transport/adminapi/apitest", mod + "/internal/testenv", mod + "/internal/testwait"}},
	{"devlxd conformance", []string{mod + "/link/devlxdapi", mod + "/api", "github.com/gorilla/websocket"},
		[]string{mod + "/link/devlxdapi", mod + "/api"}},
	{"store", []string{mod + "/errdefs", mod + "/core/errdefs", "google.golang.org/grpc"}, []string{mod + "/core/errdefs", "google.golang.org/grpc"}},
	{"store", []string{mod + "/core/events", mod + "/core/instance/record", mod + "/core/instance", mod + "/core/cluster"},
		[]string{mod + "/core/instance", mod + "/core/cluster"}},
	{"instance domain", []string{mod + "/errdefs", mod + "/db", "gorm.io/gorm", "github.com/glebarez/go-sqlite", mod + "/dbx"},
		[]string{mod + "/db", "gorm.io/gorm", "github.com/glebarez/go-sqlite"}},
	{"instance services", []string{mod + "/core/instance/record", mod + "/db/dbtest", "github.com/jackc/pgx/v5", mod + "/core/events"},
		[]string{mod + "/db/dbtest", "github.com/jackc/pgx/v5"}},
	// The domains db implements are allowed; a service beside them is not.
	{"store", []string{mod + "/core/storage", mod + "/core/instance/x", mod + "/core/storagex"}, []string{mod + "/core/instance/x", mod + "/core/storagex"}},
	{"dashboard components", []string{"github.com/a-h/templ", mod + "/api", mod + "/core/instance", mod + "/db", mod + "/plugins/sdk"},
		[]string{mod + "/core/instance", mod + "/db", mod + "/plugins/sdk"}},
	{"dashboard components", []string{mod + "/api", mod + "/web/components", "github.com/gofiber/fiber/v2", "gorm.io/gorm"},
		[]string{"github.com/gofiber/fiber/v2", "gorm.io/gorm"}},
	{"console text", []string{"strings", mod + "/web/ansi", mod + "/api", "github.com/a-h/templ"},
		[]string{mod + "/web/ansi", mod + "/api", "github.com/a-h/templ"}},
	{"CLI", []string{"fmt", mod + "/api", mod + "/client", "gorm.io/gorm", "github.com/hashicorp/go-plugin", mod + "/core/instance"},
		[]string{"gorm.io/gorm", "github.com/hashicorp/go-plugin", mod + "/core/instance"}},
	{"CLI", []string{"google.golang.org/grpc/codes", "github.com/gofiber/fiber/v2", mod + "/db", "github.com/jackc/pgx/v5"},
		[]string{"google.golang.org/grpc/codes", "github.com/gofiber/fiber/v2", mod + "/db", "github.com/jackc/pgx/v5"}},
	{"CLI", []string{mod + "/api", mod + "/errdefs", mod + "/dbx", "github.com/spf13/cobra"}, nil},
	{"metrics", []string{"github.com/prometheus/client_golang/prometheus", mod + "/core/metrics"}, []string{"github.com/prometheus/client_golang/prometheus"}},
	{"api", []string{"encoding/json", mod + "/api/utf8check", mod + "/errdefs", "github.com/goccy/go-json"},
		[]string{mod + "/errdefs", "github.com/goccy/go-json"}},
	{"errdefs", []string{"errors", "net/http", mod + "/api", "google.golang.org/grpc/codes"},
		[]string{mod + "/api", "google.golang.org/grpc/codes"}},
	{"core leaves", []string{mod + "/errdefs", mod + "/db", mod + "/core/instance", mod + "/core/status"},
		[]string{mod + "/core/instance", mod + "/core/status"}},
	{"core/linkhost", []string{mod + "/core/listener", mod + "/core/instance", mod + "/link/hybrid"}, []string{mod + "/core/instance"}},
	{"core/instance", []string{mod + "/core/events", mod + "/core/storage", mod + "/core/auth", mod + "/core/cluster", mod + "/core/linkhost"},
		[]string{mod + "/core/auth", mod + "/core/cluster", mod + "/core/linkhost"}},
	{"core/instance", []string{mod + "/core/instance/record", mod + "/core/instance/recordx", mod + "/core/guestview"},
		[]string{mod + "/core/instance/recordx", mod + "/core/guestview"}},
	{"core over instance", []string{mod + "/core/instance", mod + "/core/pki", mod + "/core/agentmon", mod + "/core/guestview"},
		[]string{mod + "/core/agentmon", mod + "/core/guestview"}},
	{"auth, images, storage, membership stores", []string{mod + "/core/membership", mod + "/errdefs", mod + "/db", "gorm.io/gorm", "github.com/jackc/pgx/v5", "google.golang.org/grpc"},
		[]string{mod + "/db", "gorm.io/gorm", "github.com/jackc/pgx/v5", "google.golang.org/grpc"}},
	{"cluster store", []string{mod + "/core/membership", mod + "/core/instance", mod + "/db/dbtest", "modernc.org/sqlite"},
		[]string{mod + "/db/dbtest", "modernc.org/sqlite"}},
	{"services without the store", []string{mod + "/core/instance/record", mod + "/db", "gorm.io/gorm", "github.com/glebarez/go-sqlite", mod + "/dbx"},
		[]string{mod + "/db", "gorm.io/gorm", "github.com/glebarez/go-sqlite"}},
	{"core tops", []string{mod + "/core/instance", mod + "/core/cluster", mod + "/core/metrics", mod + "/core/agentmon/x"},
		[]string{mod + "/core/cluster", mod + "/core/metrics", mod + "/core/agentmon/x"}},
	// What a service linked before the contract left the SDK: the SDK
	// (through the plugin host) brought gRPC, go-plugin and the wire form.
	{"services without gRPC", []string{mod + "/plugins/sdk/contract", "google.golang.org/grpc", "google.golang.org/grpc/codes",
		"github.com/hashicorp/go-plugin", mod + "/plugins/sdk/proto/backend/v1", "github.com/prometheus/client_golang/prometheus"},
		[]string{"google.golang.org/grpc", "google.golang.org/grpc/codes", "github.com/hashicorp/go-plugin", mod + "/plugins/sdk/proto/backend/v1"}},
	{"services without protobuf", []string{mod + "/plugins/sdk/contract", "google.golang.org/protobuf/proto", "github.com/golang/protobuf/ptypes/empty", "encoding/json"},
		[]string{"google.golang.org/protobuf/proto", "github.com/golang/protobuf/ptypes/empty"}},
	{"contract without gRPC", []string{"context", "errors", "google.golang.org/grpc/status", "google.golang.org/protobuf/proto",
		"github.com/hashicorp/go-plugin", mod + "/plugins/sdk/proto/backend/v1", mod + "/errdefs"},
		[]string{"google.golang.org/grpc/status", "google.golang.org/protobuf/proto", "github.com/hashicorp/go-plugin", mod + "/plugins/sdk/proto/backend/v1", mod + "/errdefs"}},
}

// TestRulesCatchViolations feeds every rule its deliberate breaks.
func TestRulesCatchViolations(t *testing.T) {
	byName := map[string]rule{}
	for _, r := range rules {
		byName[r.name] = r
	}
	broken := map[string]bool{}
	for _, tt := range breaks {
		r, ok := byName[tt.rule]
		if !ok {
			t.Errorf("break names rule %q, which does not exist", tt.rule)
			continue
		}
		got := violations(r, tt.deps)
		if !slices.Equal(got, tt.want) {
			t.Errorf("rule %q on %q: violations %q, want %q", r.name, tt.deps, got, tt.want)
		}
		if len(tt.want) > 0 {
			broken[r.name] = true
		}
	}
	for _, r := range rules {
		if !broken[r.name] {
			t.Errorf("rule %q is never fed a deliberate break: add one to breaks (%s)", r.name, r.reason)
		}
	}
}

// TestCheckReportsRealBreaks runs the check TestImportRules runs on rules
// the real tree breaks: core/instance imports core/events directly, and
// cmd/guestlinkd links gorm through the composition root but does not
// import it. Each must be reported with the package, the dependency and the
// reason, and the direct rule must not see the indirect import.
func TestCheckReportsRealBreaks(t *testing.T) {
	tests := []struct {
		r    rule
		want string // a message must contain it
	}{
		{rule{name: "probe", pkgs: []string{mod + "/core/instance"}, forbid: own("core/events"), reason: "events sit below instances, probe"},
			mod + "/core/instance depends on " + mod + "/core/events (through its dependencies), which rule \"probe\" forbids: events sit below instances, probe"},
		{rule{name: "probe transitive", pkgs: []string{mod + "/cmd/guestlinkd"}, forbid: []deps{storeStack}, reason: "the store stays under the services, probe"},
			"gorm.io/gorm (through its dependencies), which rule \"probe transitive\" forbids: the store stays under the services, probe"},
	}
	for _, tt := range tests {
		msgs := check(t, tt.r)
		if !slices.ContainsFunc(msgs, func(m string) bool { return strings.Contains(m, tt.want) }) {
			t.Errorf("rule %q on the real tree reported %q, want a message containing %q", tt.r.name, msgs, tt.want)
		}
	}
	direct := rule{name: "probe direct", pkgs: []string{mod + "/cmd/guestlinkd"}, forbid: []deps{storeStack}, direct: true, reason: "probe"}
	if msgs := check(t, direct); len(msgs) != 0 {
		t.Errorf("cmd/guestlinkd imports no gorm package itself, yet the direct rule reported %q", msgs)
	}
}
