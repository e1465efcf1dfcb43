#!/bin/sh
# Pack the packages the trial installs into ./tarballs (as ../app-openai-postgres/pack.sh does).
# Run from this folder after `pnpm build` at the repository's root.
set -e
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
mkdir -p "$here/tarballs"
for dir in packages/core packages/runner packages/ai-sdk packages/ledger-redis packages/cli apps/mock-provider apps/mock-payments; do
  (cd "$root/$dir" && pnpm pack --pack-destination "$here/tarballs" >/dev/null)
done
ls "$here/tarballs"
