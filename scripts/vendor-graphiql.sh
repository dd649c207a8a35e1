#!/usr/bin/env bash
# Vendors the GraphiQL page's browser assets into graph/graphiql/assets, so
# the page the binary serves in development loads nothing from another host
# (go:embed, graph/graphiql). Run once when changing versions; the output is
# committed. Each asset is stored gzip-compressed (-9 -n: reproducible): about
# 1.1 MB instead of 4.1 MB, served as is to browsers that accept gzip (all of
# them) and decompressed for the rest. Source maps are left out.
set -euo pipefail

GRAPHIQL=3.8.3 # the last major with a UMD build (4.x and later ship ES modules for bundlers only)
REACT=18.3.1   # GraphiQL 3 needs React 18's UMD globals

root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/graph/graphiql/assets
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cd "$tmp"
npm pack --silent "graphiql@$GRAPHIQL" "react@$REACT" "react-dom@$REACT" >/dev/null
for tgz in "graphiql-$GRAPHIQL.tgz" "react-$REACT.tgz" "react-dom-$REACT.tgz"; do
	pkg=${tgz%-*}
	mkdir "$pkg"
	tar xzf "$tgz" -C "$pkg" --strip-components=1
done

rm -f "$out"/*.gz "$out"/LICENSE.*
mkdir -p "$out"
vendor() { # src name: strip the source map comment, compress
	sed -e '/^\/\/# sourceMappingURL=/d' -e 's#/\*\# sourceMappingURL=[^*]*\*/##' "$1" | gzip -9 -n >"$out/$2.gz"
}
vendor graphiql/graphiql.min.js graphiql.min.js
vendor graphiql/graphiql.min.css graphiql.min.css
vendor react/umd/react.production.min.js react.production.min.js
vendor react-dom/umd/react-dom.production.min.js react-dom.production.min.js
cp graphiql/LICENSE "$out/LICENSE.graphiql"
cp react/LICENSE "$out/LICENSE.react"
cp react-dom/LICENSE "$out/LICENSE.react-dom"
printf 'graphiql %s\nreact %s\nreact-dom %s\n' "$GRAPHIQL" "$REACT" "$REACT" >"$out/VERSIONS"
ls -l "$out"
