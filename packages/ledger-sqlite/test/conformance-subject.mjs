// For the conformance CLI, which runs plain node: certifies the BUILT adapter (dist/; run
// `pnpm --filter @dispatch-once/ledger-sqlite build` first). The subject's hooks are the same
// TypeScript as the vitest suite's, loaded through tsx.
//   pnpm conformance --adapter packages/ledger-sqlite/test/conformance-subject.mjs
import { tsImport } from "tsx/esm/api";
import { SqliteLedger } from "../dist/index.js";

const { createSqliteSubject } = await tsImport("./subject.ts", import.meta.url);

export default createSqliteSubject(SqliteLedger, "ledger-sqlite");
