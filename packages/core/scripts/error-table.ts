import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { ERROR_CATALOGUE } from "../src/error-catalogue.js";

/**
 * The READMEs' error tables, generated from ERROR_CATALOGUE so they cannot drift: each README's
 * readme test compares its block with this output. Rewrite both blocks after a catalogue change:
 *   pnpm --filter @dispatch-once/core readme:errors
 */
const here = dirname(fileURLToPath(import.meta.url));
const packages = join(here, "..", "..");
export const BEGIN = "<!-- error-table:begin (generated from ERROR_CATALOGUE by packages/core/scripts/error-table.ts) -->";
export const END = "<!-- error-table:end -->";

/** Class name per code, read from the sources that raise them (core, and the shared runner's own three). */
function classNames(): Map<string, { name: string; from: string }> {
  const found = new Map<string, { name: string; from: string }>();
  const coreErrors = join(packages, "core", "src", "errors");
  const runnerErrors = join(packages, "runner", "src", "errors");
  const sources: [string, string][] = [
    // One file per error class in core's src/errors/.
    ...readdirSync(coreErrors)
      .filter((f) => f.endsWith(".ts"))
      .sort()
      .map((f): [string, string] => [join(coreErrors, f), "@dispatch-once/core"]),
    // Raised by the runner every stream side shares; each side re-exports them.
    ...readdirSync(runnerErrors)
      .filter((f) => f.endsWith(".ts"))
      .sort()
      .map((f): [string, string] => [join(runnerErrors, f), "@dispatch-once/runner"]),
  ];
  for (const [file, from] of sources) {
    for (const m of readFileSync(file, "utf8").matchAll(/export class (\w+) extends DispatchOnceError \{[\s\S]*?super\(\s*"([a-z_]+)"/g)) {
      found.set(m[2]!, { name: m[1]!, from });
    }
  }
  return found;
}

const EFFECT = { no: "no", yes: "**yes**", possibly: "possibly" } as const;
const RETRYABLE = { no: "no", same_message: "yes: the same message id" } as const;

export function errorTable(): string {
  const classes = classNames();
  const rows = ERROR_CATALOGUE.map((e) => {
    const cls = classes.get(e.code);
    const name = cls === undefined ? "—" : cls.from === "@dispatch-once/core" ? `\`${cls.name}\`` : `\`${cls.name}\` (${cls.from.replace("@dispatch-once/", "")})`;
    return `| \`${e.code}\` | ${name} | ${EFFECT[e.effect]} | ${RETRYABLE[e.retryable]} | ${e.raisedWhen} | ${e.rules.join(", ")} |`;
  });
  return [
    BEGIN,
    "| code | class | effect may have happened | re-send helps | raised when | spec |",
    "|---|---|---|---|---|---|",
    ...rows,
    END,
  ].join("\n");
}

/** The generated block as it stands in a README, or undefined without markers. */
export function tableIn(readme: string): string | undefined {
  const start = readme.indexOf(BEGIN);
  const end = readme.indexOf(END);
  return start === -1 || end < start ? undefined : readme.slice(start, end + END.length);
}

export const READMES = [join(packages, "core", "README.md"), join(packages, "anthropic", "README.md")];

if (process.argv.includes("--write")) {
  for (const file of READMES) {
    const readme = readFileSync(file, "utf8");
    const old = tableIn(readme);
    if (old === undefined) throw new Error(`${file}: no ${BEGIN} … ${END} block`);
    writeFileSync(file, readme.replace(old, errorTable()));
    console.log(`${file}: error table written`);
  }
}
