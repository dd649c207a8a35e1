#!/usr/bin/env bash
# Makes sure the PostgreSQL server binaries that testsupport/testpg runs (initdb,
# pg_ctl, postgres) are installed, installing Debian's postgresql package if
# they are not. Idempotent: when they are already there it only reports where.
# `make test` runs it first so that a fresh machine or CI does not end up with
# skipped (or, under CI=true, failing) database tests.
set -euo pipefail

# Same search order as testsupport/testpg, so that what this script accepts is
# what the tests will find.
find_bindir() {
	local d
	if [[ -n ${TESTPG_BINDIR:-} ]]; then
		has_server "$TESTPG_BINDIR" && { echo "$TESTPG_BINDIR"; return 0; }
		return 1
	fi
	if command -v pg_config >/dev/null 2>&1; then
		d=$(pg_config --bindir 2>/dev/null || true)
		if [[ -n $d ]] && has_server "$d"; then
			echo "$d"
			return 0
		fi
	fi
	shopt -s nullglob
	local dirs=(/usr/lib/postgresql/*/bin)
	shopt -u nullglob
	((${#dirs[@]})) || return 1
	while read -r d; do
		has_server "$d" && { echo "$d"; return 0; }
	done < <(printf '%s\n' "${dirs[@]}" | sort -rV)
	return 1
}

has_server() {
	[[ -x $1/initdb && -x $1/pg_ctl && -x $1/postgres ]]
}

if bindir=$(find_bindir); then
	echo "ensure-postgres: using $bindir"
	exit 0
fi

if [[ -n ${TESTPG_BINDIR:-} ]]; then
	# An explicit choice that is wrong should be fixed, not papered over by
	# installing some other version.
	echo "ensure-postgres: TESTPG_BINDIR=$TESTPG_BINDIR lacks initdb/pg_ctl/postgres" >&2
	exit 1
fi

sudo=()
if ((EUID != 0)); then
	if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
		sudo=(sudo -n)
	else
		echo "ensure-postgres: PostgreSQL is not installed and this needs root;" \
			"run: sudo apt-get install -y postgresql" >&2
		exit 1
	fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "ensure-postgres: no apt-get here; install the PostgreSQL server" \
		"(initdb, pg_ctl, postgres) and/or set TESTPG_BINDIR" >&2
	exit 1
fi

# The package's postinst would start Debian's own "main" cluster on port 5432,
# which the tests never use; policy-rc.d answering 101 forbids service starts
# during the install. An existing policy is left as it is.
policy=/usr/sbin/policy-rc.d
if [[ ! -e $policy ]]; then
	printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
	"${sudo[@]}" chmod 755 "$policy"
	trap '"${sudo[@]}" rm -f "$policy"' EXIT
fi

echo "ensure-postgres: installing postgresql with apt-get"
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql

if ! bindir=$(find_bindir); then
	echo "ensure-postgres: postgresql installed but initdb/pg_ctl/postgres still not found" \
		"(looked at pg_config --bindir and /usr/lib/postgresql/*/bin)" >&2
	exit 1
fi
echo "ensure-postgres: using $bindir"
