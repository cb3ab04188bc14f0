#!/usr/bin/env bash
# Installs the npm package the remote-shard tests start as their S3 server
# (@20minutes/s3rver, exact version from tests/remote/s3rver/package-lock.json)
# into tests/remote/s3rver/node_modules. Does nothing when that version is
# already there. Needs node >= 20 and npm (scripts/install-deps.sh installs
# Debian's when they are missing; the package requires Node.js 20).
set -euo pipefail
cd "$(dirname "$0")/../tests/remote/s3rver"

for tool in node npm; do
  command -v "$tool" >/dev/null || {
    echo "install-test-servers: $tool not found (scripts/install-deps.sh installs it)" >&2
    exit 1
  }
done
node_major=$(node -p 'process.versions.node.split(".")[0]')
if ((node_major < 20)); then
  echo "install-test-servers: node $(node --version) is too old: @20minutes/s3rver 4.x needs Node.js >= 20" >&2
  exit 1
fi

# The version the lock file pins, and the one installed (empty if none).
want=$(node -p 'require("./package-lock.json").packages["node_modules/@20minutes/s3rver"].version')
have=$(node -p 'try { require("./node_modules/@20minutes/s3rver/package.json").version } catch (e) { "" }')
[[ "$have" == "$want" ]] && exit 0

echo "install-test-servers: installing @20minutes/s3rver $want" >&2
# ci: exactly the lock file's versions, checked against its integrity hashes;
# no install scripts are needed by any of them.
npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null
