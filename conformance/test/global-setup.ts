import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";

/** The CLI and script tests run the built kit; rebuild it when any source is newer than dist. */
export default function setup(): void {
  const root = join(import.meta.dirname, "..");
  const built = join(root, "dist", "cli.js");
  const newest = (dir: string): number =>
    readdirSync(dir, { withFileTypes: true }).reduce((max, e) => {
      const p = join(dir, e.name);
      return Math.max(max, e.isDirectory() ? newest(p) : statSync(p).mtimeMs);
    }, 0);
  if (!existsSync(built) || statSync(built).mtimeMs < newest(join(root, "src"))) {
    execFileSync("pnpm", ["run", "build"], { cwd: root, stdio: "inherit" });
  }
}
