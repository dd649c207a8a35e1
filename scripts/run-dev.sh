#!/usr/bin/env bash
# make run: the dev chain (`voucherd devchain`, go-ethereum's simulated chain
# over JSON-RPC on 127.0.0.1:8545, in the binary make run builds with -tags
# devchain) and the service on the embedded database,
# wired to it by dev/finance.json. Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
DEVCHAIN_ADDR="${DEVCHAIN_ADDR:-127.0.0.1:8545}"
export VOUCHER_FINANCE_FILE="${VOUCHER_FINANCE_FILE:-dev/finance.json}"
# The dev sweep account (anvil's account 9, prefunded by the dev chain; a
# public test key that only pays gas): the service flushes each checkout's
# deposit address to the widget's wallet with it.
export VOUCHER_SWEEP_KEY="${VOUCHER_SWEEP_KEY:-0x2a871d0798f97d79848a013d4936a73bf4cc922c825d33c1cf7073dff6d409c6}"

./bin/voucherd devchain -addr "$DEVCHAIN_ADDR" &
chain_pid=$!
trap 'kill "$chain_pid" 2>/dev/null; wait "$chain_pid" 2>/dev/null || true' EXIT INT TERM

# Wait for the chain to answer eth_chainId (it deploys the dev tokens first).
for _ in $(seq 1 100); do
	if curl -fsS -H 'Content-Type: application/json' \
		-d '{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}' \
		"http://$DEVCHAIN_ADDR" >/dev/null 2>&1; then
		break
	fi
	if ! kill -0 "$chain_pid" 2>/dev/null; then
		echo "devchain did not start (is $DEVCHAIN_ADDR taken? set DEVCHAIN_ADDR and the rpcUrl in your finance file)" >&2
		exit 1
	fi
	sleep 0.1
done
./bin/voucherd "$@"
