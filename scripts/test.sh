#!/usr/bin/env bash
# The suite and the lint side by side (make test runs this after
# check-generated, which rewrites files and so goes first). The lint only
# reads the tree, and the suite spends much of its time waiting on
# servers, chains and browsers, so the two share the machine's cores
# instead of queueing. Both must pass; the lint's output is printed after
# the suite's so the two do not interleave.
set -uo pipefail
GO=${GO:-go}
TEST_TIMEOUT=${TEST_TIMEOUT:-20m}
TEST_PKGS=${TEST_PKGS:-./...}
# Packages tested at once: go test's default, one per core. 4 at a time
# on 2 cores was measured slower (8m50s wall and 13.7 CPU-minutes against
# 8m11s and 10.6 at the default: the race detector's work grows with the
# contention).
TEST_P=${TEST_P:-$(nproc)}

# Every go command below compiles the tree with the same flags as the
# suite's test binaries (TREEFLAGS, make test's RACEFLAGS), so a cold build
# cache compiles the service's tree once, raced, instead of once raced for
# the tests and once plain for voucherd, the lint and the generators
# (docs/testing.md, "One copy of the tree"). Through GOFLAGS the test
# binaries get them too: -race, and checkptr off in modernc.org's
# translated SQLite (docs/testing.md, "What was cut").
TREEFLAGS=${TREEFLAGS-"-race -gcflags=modernc.org/...=-d=checkptr=0"}
base_goflags=${GOFLAGS:-}
export GOFLAGS="$base_goflags $TREEFLAGS"

lintlog=$(mktemp)
bindir=$(mktemp -d)
pgd=
cleanup() {
	if [[ -n $pgd ]]; then
		kill -TERM "$pgd" 2>/dev/null
		wait "$pgd" 2>/dev/null
	fi
	rm -rf "$lintlog" "$bindir" "$genlog" "$gencopy"
}
trap cleanup EXIT

# make lint's go vet and staticcheck read TREEFLAGS; GOFLAGS goes back to
# the caller's so the lint's tools are built as they always are. It starts
# once the voucherd build below has compiled the tree: go vet and
# staticcheck's loader compile what they read, and two go commands
# compiling the same packages at once each do the work (the build cache
# does not share a compile in progress).
(
	until [[ -e $bindir/voucherd || -e $bindir/voucherd.failed ]]; do sleep 1; done
	GOFLAGS="$base_goflags" make --no-print-directory lint TREEFLAGS="$TREEFLAGS"
) >"$lintlog" 2>&1 &
lint=$!

# check-generated, in a copy of the tree, beside the suite: make generate
# rewrites the generated files (ent, gqlgen's, the printed schema, the
# OpenAPI document), so in place it had to finish before anything compiled
# the tree; entc and gqlgen run mostly on one core. In a copy it overlaps
# the suite, and the copy's generated files are compared with the tree's:
# any difference fails the run, as `make check-generated` does.
genlog=$(mktemp)
gencopy=$(mktemp -d)
(
	git ls-files -z --cached --others --exclude-standard |
		tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C "$gencopy" &&
		cd "$gencopy" &&
		GOFLAGS="$base_goflags" make --no-print-directory generate-sources &&
		# printschema and openapigen import the doors: they run once the
		# voucherd build below has compiled the tree (raced, as they are
		# built), so the two go commands do not compile the same packages
		# at the same time.
		until [[ -e $bindir/voucherd || -e $bindir/voucherd.failed ]]; do sleep 1; done &&
		GOFLAGS="$base_goflags" make --no-print-directory generate-documents TREEFLAGS="$TREEFLAGS" &&
		cd - >/dev/null &&
		if ! diff -r -q -x "*.test" -x "*.prof" "$gencopy/ent" ent || ! diff -r -q -x "*.test" -x "*.prof" "$gencopy/graph" graph ||
			! diff -q "$gencopy/gqlgen.yml" gqlgen.yml || ! diff -q "$gencopy/rest/openapi.json" rest/openapi.json; then
			echo "generated code is stale: run 'make generate' (and 'make migration NAME=...') and commit"
			exit 1
		fi
) >"$genlog" 2>&1 &
gen=$!

# One PostgreSQL cluster for every package (testsupport/testpg/testpgd,
# passed as TESTPG_URL; each test still gets a database of its own),
# instead of an initdb and a server per package. It starts while voucherd
# compiles. If it cannot start, each package starts its own as when run
# alone (and fails under CI=true if PostgreSQL is missing).
if "$GO" build -o "$bindir/testpgd" ./testsupport/testpg/testpgd; then
	"$bindir/testpgd" -max-connections $((200 * TEST_P)) >"$bindir/pgurl" 2>"$bindir/pglog" &
	pgd=$!
fi

# One voucherd binary for every package that runs it (testsupport/testserver
# reads VOUCHERD_TEST_BIN), instead of one link per package. Built raced
# like the rest: the end-to-end tests also race the service itself. The
# testhash tag makes it hash passwords with password.TestParams, as
# testserver's own build does (cmd/voucherd/hashparams_testhash.go); it
# changes the compile of cmd/voucherd alone.
if ! "$GO" build -tags testhash -o "$bindir/voucherd" ./cmd/voucherd; then
	touch "$bindir/voucherd.failed"
	wait "$lint" "$gen"
	exit 1
fi
export VOUCHERD_TEST_BIN="$bindir/voucherd"

if [[ -n $pgd ]]; then
	for _ in $(seq 1 1200); do
		[[ -s $bindir/pgurl ]] && break
		kill -0 "$pgd" 2>/dev/null || break
		sleep 0.1
	done
	if [[ -s $bindir/pgurl ]]; then
		TESTPG_URL=$(head -n1 "$bindir/pgurl")
		export TESTPG_URL
	else
		echo "testpgd did not start; each package starts its own PostgreSQL:" >&2
		cat "$bindir/pglog" >&2
	fi
fi

# Every package runs with the race detector. go test's own vet pass is off:
# make lint runs go vet's full set over the same packages beside the suite.
# ALONGSIDE_PKGS run in a go test of their own beside the others, one at a
# time: cmd/voucherd drives the real binary and mostly waits on it, its
# chains and browsers (about 2 min of wall for 1 min of CPU), so it does
# not take one of the TEST_P slots the CPU-bound packages share.
ALONGSIDE_PKGS=${ALONGSIDE_PKGS-"./cmd/voucherd"}
# Extra link flags for the test binaries (none by default: -ldflags=-w,
# no DWARF, was measured with cold runs of 14 min 3 s and 14 min 8 s
# against 12 min 1 s without it; docs/testing.md).
LINKFLAGS=${LINKFLAGS-}
TEST_FLAGS=${TEST_FLAGS:-}
module=$("$GO" list -m)
# shellcheck disable=SC2086 # TEST_PKGS and ALONGSIDE_PKGS are lists of patterns
mapfile -t all < <("$GO" list $TEST_PKGS)
alongside=()
rest=()
for p in "${all[@]}"; do
	if [[ " $ALONGSIDE_PKGS " == *" ./${p#"$module"/} "* ]]; then
		alongside+=("$p")
	else
		rest+=("$p")
	fi
done

alongsidelog=$(mktemp)
alongside_rc=0
alongside_pid=
if ((${#alongside[@]})); then
	# shellcheck disable=SC2086 # TEST_FLAGS is a list of flags
	# -parallel 4: its parallel tests wait on the binaries they start far
	# more than they compute, so two at a time (the default, one per core)
	# left it the last package running. (Eight at a time was slower: its
	# services then took CPU from the other packages' compiles and runs.)
	"$GO" test $TEST_FLAGS -race -vet=off $LINKFLAGS -count=1 -p 1 -parallel 4 -timeout "$TEST_TIMEOUT" "${alongside[@]}" >"$alongsidelog" 2>&1 &
	alongside_pid=$!
fi
# The longest packages first: go test starts packages in the order given
# (and prints them in that order), so a long package listed last ran alone
# at the end while the other core idled. LONG_PKGS are the longest of a
# measured run (docs/testing.md), longest first; the others follow in
# import path order.
LONG_PKGS=${LONG_PKGS-"./graph ./rest ./checkoutpage ./internal/webhook ./internal/settlement ./internal/voucher ./internal/pubsub ./internal/ratelimit ./internal/session ./internal/storage ./bench/harness"}
ordered=()
for l in $LONG_PKGS; do
	for p in "${rest[@]}"; do
		[[ $p == "$module/${l#./}" ]] && ordered+=("$p")
	done
done
for p in "${rest[@]}"; do
	[[ " ${ordered[*]} " == *" $p "* ]] || ordered+=("$p")
done
rest=("${ordered[@]}")
testrc=0
if ((${#rest[@]})); then
	# shellcheck disable=SC2086 # TEST_FLAGS is a list of flags
	"$GO" test $TEST_FLAGS -race -vet=off $LINKFLAGS -count=1 -p "$TEST_P" -timeout "$TEST_TIMEOUT" "${rest[@]}"
	testrc=$?
fi
if [[ -n $alongside_pid ]]; then
	wait "$alongside_pid"
	alongside_rc=$?
	echo "== beside the others: ${alongside[*]#"$module"/}"
	cat "$alongsidelog"
fi
rm -f "$alongsidelog"
((testrc == 0)) && testrc=$alongside_rc

wait "$gen"
genrc=$?
echo "== check-generated (make generate in a copy of the tree, beside the suite): exit $genrc"
cat "$genlog"

wait "$lint"
lintrc=$?
echo "== make lint (ran beside the suite): exit $lintrc"
cat "$lintlog"

if ((testrc != 0)); then
	echo "FAIL: go test exited $testrc" >&2
fi
if ((lintrc != 0)); then
	echo "FAIL: make lint exited $lintrc" >&2
fi
if ((genrc != 0)); then
	echo "FAIL: check-generated exited $genrc" >&2
fi
((testrc == 0 && lintrc == 0 && genrc == 0))
