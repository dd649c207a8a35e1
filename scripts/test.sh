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
trap 'rm -rf "$lintlog" "$bindir"' EXIT

make --no-print-directory lint >"$lintlog" 2>&1 &
lint=$!

# One voucherd binary for every package that runs it (testsupport/testserver
# reads VOUCHERD_TEST_BIN), instead of one link per package.
"$GO" build -o "$bindir/voucherd" ./cmd/voucherd || { wait "$lint"; exit 1; }
export VOUCHERD_TEST_BIN="$bindir/voucherd"

# shellcheck disable=SC2086 # TEST_PKGS is a list of patterns
"$GO" test -race -count=1 -p "$TEST_P" -timeout "$TEST_TIMEOUT" $TEST_PKGS
testrc=$?

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
