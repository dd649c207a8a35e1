# The front door. `make run` starts the service on the embedded database;
# `make test` runs the whole suite (SQLite and a throwaway PostgreSQL).
GO        ?= go
# Every go command make runs builds with -trimpath (the caller's GOFLAGS kept
# beside it). Without it Go keys each compiled package on its absolute
# directory, so a fresh checkout (CI's) recompiled the whole tree, ent's and
# gqlgen's output under the race detector among it, three times over: for the
# generators, the suite and the lint (about 370 s of CPU on 2 cores). With
# it, a checkout anywhere reuses what any other checkout compiled.
GOFLAGS   ?=
export GOFLAGS := $(strip $(filter-out -trimpath,$(GOFLAGS)) -trimpath)
STATICCHECK_VERSION ?= v0.8.2
TEST_TIMEOUT ?= 20m
# Build flags for every go command that compiles the service's own tree
# outside `go test`: the generators that import the doors (printschema,
# openapigen), go vet and staticcheck's loader. Empty for a developer's
# `make generate` or `make lint`; `make test` sets -race so these share the
# raced compile its tests need, instead of compiling the whole tree a second
# time without the detector (docs/testing.md, "One copy of the tree").
TREEFLAGS ?=
# make test's TREEFLAGS: the race detector everywhere, and the compiler's
# checkptr instrumentation (which -race turns on in every package) off in
# modernc.org's packages only: they are SQLite's C translated to Go, whose
# unsafe.Pointer arithmetic checkptr re-checked on every statement, a third
# to a half of the SQLite-bound packages' test CPU (docs/testing.md,
# "What was cut"). Our own packages keep it.
RACEFLAGS = -race -gcflags=modernc.org/...=-d=checkptr=0

.PHONY: run build test test-short generate generate-sources generate-documents check-generated lint bench bench-settlement migration ensure-postgres ensure-chromium ensure-promtool fuzz

## run: the dev chain (`voucherd devchain`: an in-process go-ethereum chain
## served on 127.0.0.1:8545, dev tokens at fixed addresses) and the service
## on the embedded database, wired to it by dev/finance.json. See
## docs/settlement.md. One build and one link: the dev chain is a voucherd
## subcommand compiled in by the devchain tag (`make build` and the tests'
## binary leave it out, so the service never links a node). The cold cost
## of this build is in the README ("What a first run costs").
run:
	$(GO) build -tags devchain -o bin/voucherd ./cmd/voucherd
	@bash scripts/run-dev.sh

build:
	$(GO) build -o bin/voucherd ./cmd/voucherd

## test: everything, on SQLite and PostgreSQL, with the race detector, after
## checking that generated code and migrations are up to date; the lint
## (gofmt, go vet, staticcheck) runs beside the suite (scripts/test.sh) and
## must pass too.
test: TREEFLAGS = $(RACEFLAGS)
test: ensure-postgres ensure-chromium ensure-promtool
	@GO=$(GO) TEST_TIMEOUT=$(TEST_TIMEOUT) TREEFLAGS='$(TREEFLAGS)' bash scripts/test.sh

## test-short: the suite without regenerating (for quick local loops).
test-short: ensure-postgres ensure-chromium ensure-promtool
	$(GO) test -count=1 ./...

ensure-postgres:
	@bash scripts/ensure-postgres.sh

## ensure-chromium: Debian's chromium for the headless browser tests
## (testsupport/testbrowser), installed with apt-get when missing.
ensure-chromium:
	@bash scripts/ensure-chromium.sh

## ensure-promtool: Prometheus' promtool (Debian's prometheus package), which
## cmd/voucherd TestMetrics runs on the real binary's /metrics.
ensure-promtool:
	@bash scripts/ensure-promtool.sh

## generate: ent first (it writes graph/schema/ent.graphql), then gqlgen,
## then the printed schema (graph/schema.graphql: one SDL file, no gqlgen
## directives, as GET /graphql/schema.graphql serves it), then the OpenAPI
## document (rest/openapi.json from rest/openapi.yaml and the route table).
## (generate-sources runs the first two, generate-documents the last two:
## make test runs them apart, see scripts/test.sh.)
generate:
	@$(MAKE) --no-print-directory generate-sources
	@$(MAKE) --no-print-directory generate-documents

generate-sources:
	cd ent && $(GO) run -mod=mod entc.go
	$(GO) run github.com/99designs/gqlgen generate

generate-documents:
	$(GO) run $(TREEFLAGS) ./cmd/printschema
	$(GO) run $(TREEFLAGS) ./cmd/openapigen

## check-generated: regenerate and fail if anything committed was stale.
check-generated: generate
	@if [ -n "$$(git status --porcelain -- ent graph gqlgen.yml internal/storage/migrations rest/openapi.json)" ]; then \
		echo "generated code is stale: run 'make generate' (and 'make migration NAME=...') and commit:"; \
		git status --porcelain -- ent graph gqlgen.yml internal/storage/migrations rest/openapi.json; \
		git --no-pager diff --stat -- ent graph; \
		exit 1; \
	fi

## migration: write the next versioned migration from ent/schema, e.g. make migration NAME=add_widgets
migration: ensure-postgres
	$(GO) run ./cmd/migrategen -name $(NAME)

## lint: gofmt, go vet and staticcheck over hand-written code. Generated
## code (files marked "Code generated ... DO NOT EDIT", the ent packages but
## ent/schema, graph/generated, graph/model) is left out: it is checked by
## check-generated and fixed by changing its generator's input, not by hand.
LINT_FILES = $$(git ls-files '*.go' | xargs grep -L '^// Code generated .* DO NOT EDIT\.$$')
LINT_PKGS  = $$($(GO) list ./... | grep -v -e '/ent$$' -e '/graph/generated$$' -e '/graph/model$$' | grep -v -e '/ent/' ; $(GO) list ./ent/schema)
## go vet and staticcheck read the tree as make run builds it (-tags
## devchain: cmd/voucherd's dev chain, devchain.go, is the only code the
## tag changes); the tagless stub, devchain_off.go, is vetted as a file of
## its own. Build tags are part of every vet action's cache key, so a second
## go vet of cmd/voucherd with the tag re-vetted all of its ~990
## dependencies (56 CPU-seconds from a cold cache, docs/testing.md) for one
## file.
lint:
	@out="$$(gofmt -l $(LINT_FILES))"; test -z "$$out" || { echo "gofmt needed:"; echo "$$out"; exit 1; }
	$(GO) vet $(TREEFLAGS) -tags devchain $(LINT_PKGS)
	$(GO) vet $(TREEFLAGS) ./cmd/voucherd/devchain_off.go
	$(GO) run -exec "env 'GOFLAGS=$(strip $(GOFLAGS) $(TREEFLAGS))'" honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) -tags devchain $(LINT_PKGS)

fuzz:
	$(GO) test ./internal/money -run '^$$' -fuzz FuzzParse -fuzztime 30s
	$(GO) test ./internal/httpx -run '^$$' -fuzz FuzzCheckJSON -fuzztime 30s
	$(GO) test ./graph/bounds -run '^$$' -fuzz FuzzCheck -fuzztime 30s
	$(GO) test ./graph/engine -run '^$$' -fuzz FuzzDecodeParams -fuzztime 30s

## bench: the service against the machine's own limits (pgbench running its
## redeem SQL, a bare net/http read, a bare websocket fan-out), measured side
## by side on a throwaway durable PostgreSQL, then the settlement benchmarks
## (their compiled tests, run by voucherbench's settlement group); prints one
## table and writes bench/out/results.json and report.html; a missed target
## fails it. BENCH_FLAGS passes flags, e.g. BENCH_FLAGS="-duration 20s
## -profile". See docs/performance.md.
BENCH_FLAGS ?=
bench: ensure-postgres
	$(GO) build -o bin/ ./cmd/voucherd ./cmd/voucherbench
	$(GO) test -c -o bin/ ./internal/settlement ./cmd/voucherd
	ulimit -n "$$(ulimit -Hn)" && ./bin/voucherbench -voucherd bin/voucherd -settlement-test bin/settlement.test -sweep-test bin/voucherd.test -out bench/out $(BENCH_FLAGS)

## bench-settlement: the settlement lines alone (internal/settlement's
## BenchmarkWatcher1000 on SQLite and PostgreSQL: 1,000 pending vouchers,
## RPC calls and CPU per new block, confirmation→deposit.confirmed delivered
## p99, resolve p50 verified and not) and, beside it, BenchmarkDetect1000:
## 1,000 open deposit addresses, RPC calls and CPU per new block, payment
## mined→pending p99, confirming block→deposit.confirmed delivered p99; then
## cmd/voucherd's BenchmarkSweeps100: sweep transactions per 100 confirmed
## checkouts on anvil. make bench runs the same benchmarks in its table
## (voucherbench -only settlement). See docs/settlement.md.
bench-settlement: ensure-postgres
	SETTLEMENT_BENCH_POLLS=20 $(GO) test ./internal/settlement -run '^$$' -bench 'Watcher1000|Detect1000' -benchtime 1x -timeout 30m
	$(GO) test ./cmd/voucherd -run '^$$' -bench Sweeps100 -benchtime 1x -timeout 15m
