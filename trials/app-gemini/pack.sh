#!/bin/sh
# Pack the packages an application installs, as tests/pack-install/run.mjs does, into ./tarballs.
# Run from this folder after `pnpm build` at the repository's root.
set -e
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
mkdir -p "$here/tarballs"
for dir in packages/core packages/runner packages/conversation-postgres packages/ledger-postgres packages/cli apps/mock-provider apps/mock-payments; do
  (cd "$root/$dir" && pnpm pack --pack-destination "$here/tarballs" >/dev/null)
done
ls "$here/tarballs"
