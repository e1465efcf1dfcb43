#!/bin/sh
# Pack the packages the operator's service installs into ./tarballs (as trials/app-openai-postgres/pack.sh).
# Run from this folder after `pnpm build` at the repository's root.
set -e
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
mkdir -p "$here/tarballs"
for dir in packages/core packages/runner packages/anthropic packages/conversation-postgres packages/ledger-postgres packages/ledger-redis packages/cli packages/opentelemetry apps/mock-provider apps/mock-payments; do
  (cd "$root/$dir" && pnpm pack --pack-destination "$here/tarballs" >/dev/null)
done
ls "$here/tarballs"
