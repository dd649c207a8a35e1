#!/usr/bin/env bash
# Makes sure Debian's chromium (the browser the headless browser tests drive
# through chromedp, testsupport/testbrowser) is installed, installing it with
# apt-get when it is not. Idempotent: when it is there it only reports where.
# `make test` runs it first, so a fresh machine or CI does not end up with
# skipped (or, under CI=true, failing) browser tests.
set -euo pipefail

find_chromium() {
	local c
	if [[ -n ${CHROMIUM_BIN:-} ]]; then
		[[ -x $CHROMIUM_BIN ]] && { echo "$CHROMIUM_BIN"; return 0; }
		return 1
	fi
	for c in /usr/bin/chromium /usr/bin/chromium-browser; do
		[[ -x $c ]] && { echo "$c"; return 0; }
	done
	return 1
}

if bin=$(find_chromium); then
	echo "ensure-chromium: using $bin"
	exit 0
fi

if [[ -n ${CHROMIUM_BIN:-} ]]; then
	# An explicit choice that is wrong should be fixed, not papered over.
	echo "ensure-chromium: CHROMIUM_BIN=$CHROMIUM_BIN is not an executable" >&2
	exit 1
fi

sudo=()
if ((EUID != 0)); then
	if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
		sudo=(sudo -n)
	else
		echo "ensure-chromium: chromium is not installed and this needs root;" \
			"run: sudo apt-get install -y chromium" >&2
		exit 1
	fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "ensure-chromium: no apt-get here; install Chromium and/or set CHROMIUM_BIN" >&2
	exit 1
fi

echo "ensure-chromium: installing chromium with apt-get"
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium

if ! bin=$(find_chromium); then
	echo "ensure-chromium: chromium installed but not found at /usr/bin/chromium" >&2
	exit 1
fi
echo "ensure-chromium: using $bin"
