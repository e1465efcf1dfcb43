// Default export for `pnpm conformance --adapter packages/ledger-sqlite/test/conformance-subject.ts`
// when run under tsx; the CLI on plain node uses conformance-subject.mjs (built dist/).
import { SqliteLedger } from "../src/index.js";
import { createSqliteSubject } from "./subject.js";

export default createSqliteSubject(SqliteLedger);
