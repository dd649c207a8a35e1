#!/usr/bin/env bash
# make run: the dev chain (cmd/devchain, go-ethereum's simulated chain over
# JSON-RPC on 127.0.0.1:8545) and the service on the embedded database,
# wired to it by dev/finance.json. Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
DEVCHAIN_ADDR="${DEVCHAIN_ADDR:-127.0.0.1:8545}"
export VOUCHER_FINANCE_FILE="${VOUCHER_FINANCE_FILE:-dev/finance.json}"

./bin/devchain -addr "$DEVCHAIN_ADDR" &
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
