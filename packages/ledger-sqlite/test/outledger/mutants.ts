// Round "outledger" (conformance/README.md): bugs an outside team made writing a MariaDB ledger
// from the public docs (trials/ledger-mariadb/FRICTION.md), which the whole kit certified, planted
// here as single mutations of this adapter's REAL source (mutatedEntry, @dispatch-once/test-processes;
// src/ itself is never written).
import type { SourceMutant } from "@dispatch-once/test-processes";

export const OUTLEDGER_MUTANTS: readonly SourceMutant[] = [
  {
    id: "ol-forgotten-before-decode",
    rule: "LEDGER-11",
    cause:
      "the MariaDB trial's claim and lookup asked 'is this row past its retention?' from the raw columns before decoding the row, so a row it cannot read whose retention column says old was taken for forgotten: lookup answered absent, claim took it as a first claim (doubt became absence). Planted narrowly: only a row that does not decode is read this way, as the trial did (its forgotten rows that decode are handled as before)",
    patches: [
      {
        file: "sqlite-ledger.ts",
        from: "    const { row, expiresAt } = decodeRow(key, raw);\n    // Written out, not spread",
        to:
          "    let decoded: DecodedRow;\n    try {\n      decoded = decodeRow(key, raw);\n    } catch (error) {\n      // Past its retention: forgotten, whatever it holds.\n      if (raw.state !== \"in_flight\" && typeof raw.expires_at === \"number\" && raw.expires_at <= raw.now) return undefined;\n      throw error;\n    }\n    const { row, expiresAt } = decoded;\n    // Written out, not spread",
      },
    ],
  },
];
