// Entry point for `pnpm conformance --adapter packages/ledger-postgres/test/conformance-subject.mjs`:
// the CLI runs plain node, so the TypeScript subject is loaded through tsx.
// DATABASE_URL selects the server (default postgres://postgres@127.0.0.1:5432/test).
import { tsImport } from "tsx/esm/api";

const mod = await tsImport("./subject.ts", import.meta.url);
export const subject = mod.postgresSubject;
export default mod.postgresSubject;
