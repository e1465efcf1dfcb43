// Entry point for `pnpm conformance --adapter packages/ledger-redis/test/conformance-subject.mjs`:
// the CLI runs plain node, so the TypeScript subject is loaded through tsx.
import { tsImport } from "tsx/esm/api";

const mod = await tsImport("./subject.ts", import.meta.url);
export const subject = mod.redisSubject;
export default mod.redisSubject;
