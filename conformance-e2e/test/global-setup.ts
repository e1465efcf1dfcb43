import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";

/**
 * The CLI tests run the built kit (the base package's CLI loading this package's dist): rebuild
 * whichever of the two has a source newer than its dist.
 */
export default function setup(): void {
  const newest = (dir: string): number =>
    readdirSync(dir, { withFileTypes: true }).reduce((max, e) => {
      const p = join(dir, e.name);
      return Math.max(max, e.isDirectory() ? newest(p) : statSync(p).mtimeMs);
    }, 0);
  for (const [pkg, built] of [["conformance", "cli.js"], ["conformance-e2e", "index.js"]] as const) {
    const root = join(import.meta.dirname, "..", "..", pkg);
    const file = join(root, "dist", built);
    if (!existsSync(file) || statSync(file).mtimeMs < newest(join(root, "src"))) {
      execFileSync("pnpm", ["run", "build"], { cwd: root, stdio: "inherit" });
    }
  }
}
