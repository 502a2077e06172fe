#!/bin/sh
# Regenerate the tools sections of manifests/example.yaml and manifests/demo.yaml
# from the live servers installed in tests/node_modules (no network needed).
# Arguments are passed on to regen-manifests.mjs: [--check] [--caps none|basic|full] [MANIFEST...]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -d "$here/../node_modules/@modelcontextprotocol/sdk" ]; then
	echo "regen-manifests: installing tests/node_modules (npm ci)" >&2
	(cd "$here/.." && npm ci --no-audit --no-fund >&2)
fi
exec node "$here/regen-manifests.mjs" "$@"
