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

lintlog=$(mktemp)
bindir=$(mktemp -d)
pgd=
cleanup() {
	if [[ -n $pgd ]]; then
		kill -TERM "$pgd" 2>/dev/null
		wait "$pgd" 2>/dev/null
	fi
	rm -rf "$lintlog" "$bindir"
}
trap cleanup EXIT

make --no-print-directory lint >"$lintlog" 2>&1 &
lint=$!

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
# reads VOUCHERD_TEST_BIN), instead of one link per package.
"$GO" build -o "$bindir/voucherd" ./cmd/voucherd || { wait "$lint"; exit 1; }
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

# The race detector where it can find something. It reports two
# goroutines of the test process touching memory without order, so it
# runs on every package whose tests or code run goroutines. These packages
# run every test without it (docs/operations.md, "Testing"):
#  - cmd/voucherd: its tests drive the real binary, a process of its own
#    the detector cannot see into (the service's concurrency is raced in
#    the packages that run it in-process: graph, rest, internal/...); in
#    the test process are only the test's clients and the simulated chain.
#  - packages whose tests and code start no goroutine (pure functions and
#    tables: money, ids, paging, bounds, ...), where it has nothing to see.
# A package added to the module is raced unless it is added here.
NORACE_PKGS=${NORACE_PKGS-"./cmd/voucherd ./graph/bounds ./internal/chain ./internal/config ./internal/ids ./internal/layering ./internal/money ./internal/operation ./internal/paging ./internal/secretbox ./internal/webhook/signing"}
TEST_FLAGS=${TEST_FLAGS:-}
module=$("$GO" list -m)
# shellcheck disable=SC2086 # TEST_PKGS and NORACE_PKGS are lists of patterns
mapfile -t all < <("$GO" list $TEST_PKGS)
norace=()
race=()
for p in "${all[@]}"; do
	if [[ " $NORACE_PKGS " == *" ./${p#"$module"/} "* ]]; then
		norace+=("$p")
	else
		race+=("$p")
	fi
done

# Both sets at once (the non-raced is cmd/voucherd, one long package,
# and small ones); its output is printed after the raced set's.
noracelog=$(mktemp)
norace_rc=0
norace_pid=
if ((${#norace[@]})); then
	# shellcheck disable=SC2086 # TEST_FLAGS is a list of flags
	"$GO" test $TEST_FLAGS -count=1 -p 1 -timeout "$TEST_TIMEOUT" "${norace[@]}" >"$noracelog" 2>&1 &
	norace_pid=$!
fi
testrc=0
if ((${#race[@]})); then
	# shellcheck disable=SC2086 # TEST_FLAGS is a list of flags
	"$GO" test $TEST_FLAGS -race -count=1 -p "$TEST_P" -timeout "$TEST_TIMEOUT" "${race[@]}"
	testrc=$?
fi
if [[ -n $norace_pid ]]; then
	wait "$norace_pid"
	norace_rc=$?
	echo "== without the race detector: ${norace[*]#"$module"/}"
	cat "$noracelog"
fi
rm -f "$noracelog"
((testrc == 0)) && testrc=$norace_rc

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
((testrc == 0 && lintrc == 0))
