#!/usr/bin/env bash
# Makes sure Prometheus' promtool is installed (Debian's prometheus package
# ships /usr/bin/promtool), installing it with apt-get when it is not.
# cmd/voucherd TestMetrics pipes the real binary's /metrics through
# `promtool check metrics`. Idempotent; `make test` runs it first. The
# package's service is not started: Debian's policy-rc.d on build machines
# denies it, and nothing here needs a Prometheus server.
set -euo pipefail

find_promtool() {
	if [[ -n ${PROMTOOL:-} ]]; then
		[[ -x $PROMTOOL ]] && { echo "$PROMTOOL"; return 0; }
		return 1
	fi
	command -v promtool
}

if bin=$(find_promtool); then
	echo "ensure-promtool: using $bin"
	exit 0
fi
if [[ -n ${PROMTOOL:-} ]]; then
	echo "ensure-promtool: PROMTOOL=$PROMTOOL is not an executable" >&2
	exit 1
fi

sudo=()
if ((EUID != 0)); then
	if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
		sudo=(sudo -n)
	else
		echo "ensure-promtool: promtool is not installed and this needs root;" \
			"run: sudo apt-get install -y --no-install-recommends prometheus" >&2
		exit 1
	fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "ensure-promtool: no apt-get here; install promtool and/or set PROMTOOL" >&2
	exit 1
fi

echo "ensure-promtool: installing Debian's prometheus package (for promtool) with apt-get"
if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus; then
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus
fi

if ! bin=$(find_promtool); then
	echo "ensure-promtool: prometheus installed but promtool not found" >&2
	exit 1
fi
echo "ensure-promtool: using $bin"
