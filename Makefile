# guestlink build. `make help` lists the targets.
SHELL := /bin/bash
GO ?= go
BIN := bin
export CGO_ENABLED := 0
STATE_DIR ?= $(CURDIR)/.run
HTTP ?= 127.0.0.1:8080
BENCHTIME ?= 1x
# Reproducible outputs: binaries carry no VCS stamp (the same sources give
# the same bytes on every commit) and packages get fixed file times, so the
# Debian image, keyed by the agent package's hash, is rebuilt only when
# what goes into the package changes (scripts/guest-image-debian.sh).
GOBUILD := $(GO) build -trimpath -buildvcs=false
SOURCE_DATE_EPOCH ?= 1735689600
# Go modules of this repository: the daemon's (root), the wire types' (api,
# which the CLI and any client import without a line of the server: it
# requires nothing but the standard library) and the plugin SDK's, which
# plugin authors import without the daemon's modules. `./...` in the root
# does not reach into api or plugins/sdk, so lint and test-go visit each.
MODULES := . api plugins/sdk

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}' \
	  | sed -e 's|\$$(HTTP)|$(HTTP)|g' -e 's|\$$(STATE_DIR)|$(STATE_DIR)|g'

.PHONY: build
build: ## build guestlinkd, guestlink, guestlink-agent and the plugins into bin/
	@mkdir -p $(BIN)/plugins
	$(GOBUILD) -o $(BIN)/ ./cmd/guestlinkd ./cmd/guestlink ./cmd/guestlink-agent
	$(GOBUILD) -o $(BIN)/plugins/sim ./plugins/sim
	$(GOBUILD) -o $(BIN)/plugins/fleet ./plugins/fleet
	@for p in qemu qemu-legacy; do \
	  if [ -d plugins/$$p ] && ls plugins/$$p/*.go >/dev/null 2>&1; then $(GOBUILD) -o $(BIN)/plugins/$$p ./plugins/$$p; fi; \
	done
	@cd $(BIN)/plugins && rm -f SHA256SUMS && sha256sum $$(ls | grep -v SHA256SUMS) > SHA256SUMS.tmp && mv SHA256SUMS.tmp SHA256SUMS
	@chmod -R go-w $(BIN) # the daemon refuses plugins that others could replace (any umask)

.PHONY: run
run: build ## build, start the daemon (SQLite, sim backend, dashboard on $(HTTP), or the next free port; HTTP=ADDR to choose) and launch a demo guest
	@STATE_DIR="$(STATE_DIR)" HTTP="$(HTTP)" PICK_PORT=$(if $(filter file,$(origin HTTP)),1,) scripts/run.sh

.PHONY: cluster-demo
cluster-demo: build ## run the three-member cluster of docs/cluster.md on this machine (a private PostgreSQL; Ctrl-C removes it all)
	@scripts/cluster-demo.sh

.PHONY: stop
stop: build ## stop every guest of make run's state directory (starts the daemon for it if needed)
	@STATE_DIR="$(STATE_DIR)" scripts/stop.sh

.PHONY: guest-image
guest-image: ## build the QEMU test guest (Debian cloud kernel, busybox, static agent) into bin/guest/ (cached outside the tree)
	scripts/guest-image.sh "$(GO)" $(BIN)/guest

# Packages and the Debian guest image (issue 10; docs/guests.md).
PKG_VERSION ?= 0.0.0~dev
.PHONY: packages
packages: build ## build the .deb packages into bin/packages/ (guestlink-agent, guestlink)
	@mkdir -p $(BIN)/packages
	$(GO) run ./internal/gencli -out $(BIN)/cli-docs
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) GUESTLINK_VERSION=$(PKG_VERSION) $(GO) tool -modfile=tools/go.mod nfpm package --config packaging/agent/nfpm.yaml --packager deb --target $(BIN)/packages/
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) GUESTLINK_VERSION=$(PKG_VERSION) $(GO) tool -modfile=tools/go.mod nfpm package --config packaging/host/nfpm.yaml --packager deb --target $(BIN)/packages/

.PHONY: cloud-init-trixie
cloud-init-trixie: ## build the Debian 13 tree with cloud-init that TestDevlxdCloudInitTrixie runs its LXD datasource in (cached outside the tree)
	scripts/cloud-init-trixie.sh >/dev/null

.PHONY: guest-image-debian
guest-image-debian: packages ## build the Debian 12 guest disk image into bin/images/debian-12.img (cached outside the tree)
	scripts/guest-image-debian.sh $(BIN)/packages $(BIN)/images

.PHONY: guest-image-debian-13
guest-image-debian-13: packages ## build the Debian 13 (trixie, systemd 257) guest disk image into bin/images/debian-13.img (cached outside the tree)
	scripts/guest-image-debian.sh $(BIN)/packages $(BIN)/images trixie

.PHONY: deps
deps: ## install the Debian packages the VM path needs (QEMU and its firmware, qemu-utils, genisoimage, mmdebstrap) and those the tests need, and npm packages
	scripts/install-deps.sh

.PHONY: generate
generate: ## regenerate templ, protobuf, CSS and the docs' backend config key tables
	$(GO) tool templ generate -path web/components
	$(GO) tool -modfile=tools/go.mod buf generate
	$(GO) run ./internal/genkeys
	@if [ -f package.json ] && [ -d node_modules ]; then npm run --silent build:css; fi

.PHONY: check-generated
check-generated: generate ## fail if regenerating changes committed files
	@git diff --exit-code --stat -- '*.go' 'web/assets' 'docs/*.md' || { echo "generated files are stale: run make generate and commit"; exit 1; }

.PHONY: check-proto
check-proto: ## buf lint and buf breaking of the plugin contract against the last release's descriptor set
	$(GO) tool -modfile=tools/go.mod buf lint
	$(GO) tool -modfile=tools/go.mod buf breaking --against $(PROTO_BASELINE)

# The plugin contract as last released: buf breaking compares the proto with
# it. Refreshed (and committed) at an SDK release, never in between.
PROTO_BASELINE := plugins/sdk/proto/backend/v1/backend.v0.binpb
.PHONY: proto-baseline
proto-baseline: ## at an SDK release: write the contract's descriptor set that check-proto compares against
	$(GO) tool -modfile=tools/go.mod buf build --exclude-source-info -o $(PROTO_BASELINE)

.PHONY: lint
lint: ## gofmt, go vet and go mod tidy of every module (the import rules are internal/deptest's test)
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '_templ.go$$')); [ -z "$$out" ] || { echo "gofmt needed: $$out"; exit 1; }
	@set -e; for m in $(MODULES); do echo "== $$m"; (cd $$m && $(GO) vet ./... && $(GO) mod tidy -diff); done

.PHONY: depaware
depaware: ## rewrite what the CLI, the agent, the SDK and api link (internal/deptest/testdata/depaware/) and the docs' generated lists from the code
	$(GO) test -count=1 -run 'TestDepaware$$|TestAgentModulesDocumented|TestArchitectureRuleTable' ./internal/deptest -update

.PHONY: test
test: deps build guest-image packages guest-image-debian guest-image-debian-13 cloud-init-trixie lint check-generated check-proto ## run every test (installs what it needs); fails if a test leaves a process or a change behind
	@scripts/check-leftovers.sh run -- $(MAKE) --no-print-directory test-go test-race test-js test-fuzz

.PHONY: test-go
test-go: ## the Go tests of every module (no install, no checks)
	@set -e; for m in $(MODULES); do echo "== $$m"; (cd $$m && $(GO) test -p 1 -count=1 -timeout 45m ./...); done # one package at a time: the VM and daemon tests are timing-sensitive on 2 cores

# The race detector needs cgo. The end-to-end package (e2e) runs
# their daemons as separate processes, which -race does not instrument.
# api is a module of its own (MODULES), so its packages run from api/.
RACE_PKGS := ./core/... ./daemon/... ./e2e/... ./errdefs/... ./client/... ./agent/... ./link/... ./db/...
.PHONY: test-race
test-race: ## the daemon, agent, link and db packages under the race detector
	CGO_ENABLED=1 $(GO) test -race -p 1 -count=1 -timeout 30m $(RACE_PKGS)
	cd api && CGO_ENABLED=1 $(GO) test -race -p 1 -count=1 ./...

# Every fuzz target of the repository (func FuzzX in a _test.go file) for
# FUZZTIME each, after its seed corpus (f.Add and testdata/fuzz/FuzzX/); the
# fuzzer's cache is a temporary directory, so a run writes nothing into the
# tree unless a target fails (its input then lands in testdata/fuzz/FuzzX/:
# fix the bug and commit the file as a seed).
FUZZTIME ?= 10s
.PHONY: test-fuzz
test-fuzz: ## each fuzz target for FUZZTIME (10s) after its seed corpus
	@GO=$(GO) scripts/test-fuzz.sh $(FUZZTIME)

.PHONY: test-js
test-js: ## the browser tests (Chromium)
	@if [ -f package.json ]; then npm test; fi

.PHONY: bench-fleet
bench-fleet: build ## 10,000 fleet guests on one daemon: issue 14's scale targets, TARGET lines (FLEET_N=... runs it smaller)
	GO=$(GO) ./scripts/bench-fleet.sh

.PHONY: bench
bench: build guest-image ## run the benchmarks named in the issues; figures go to docs/performance.md
	@ulimit -n "$$(ulimit -Hn)"; set -e; \
	echo "== store: durable state-change writes (SQLite)"; \
	$(GO) test -count=1 -vet=off -run '^$$' -bench 'StateChangeWrites/sqlite' -benchtime 3s ./db; \
	echo "== daemon at 10,000 instances: list, RSS, state changes, cold start"; \
	GUESTLINK_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -vet=off -timeout 20m -run '^$$' -bench 'Daemon10k' -benchtime 10x ./e2e; \
	echo "== guest link: GET /1.0 via the agent, agent state -> event"; \
	GUESTLINK_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -vet=off -timeout 20m -run '^$$' -bench 'GuestLinkGet|AgentStateEvent' -benchtime 500x ./e2e; \
	echo "== exec round trip (true) through the agent, per link type"; \
	GUESTLINK_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -vet=off -timeout 20m -run '^$$' -bench 'ExecRoundTrip' -benchtime 200x ./e2e; \
	echo "== the agent over guestlink's vsock device in a QEMU guest (TCG here): GET /1.0 to the floor, MB/s, CPU per packet"; \
	GUESTLINK_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -vet=off -timeout 20m -run '^$$' -bench 'AgentVsock' -benchtime 1x ./e2e; \
	echo "== file push of 100 MiB through the agent, per link type"; \
	GUESTLINK_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -vet=off -timeout 20m -run '^$$' -bench 'FilePush' -benchtime 5x ./e2e; \
	echo "== 1,000 running guests: idle CPU, Ready -> instance-ready"; \
	GUESTLINK_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -vet=off -timeout 20m -run '^$$' -bench 'Ready1000' -benchtime 1x ./e2e; \
	echo "== cluster of three members on PostgreSQL: forwarding, events across members, offline detection, list of 10,000"; \
	GUESTLINK_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -vet=off -timeout 20m -run '^$$' -bench 'Cluster' -benchtime 300x ./e2e

.PHONY: screenshots
screenshots: build ## regenerate the committed docs/dashboard-*.png with the browser tests (npm test writes them outside the tree)
	GUESTLINK_SCREENSHOTS=docs npm test

.PHONY: clean
clean: ## remove build output and the run state
	rm -rf $(BIN) $(STATE_DIR)
