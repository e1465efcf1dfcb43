// One part of `pnpm bench` in a process of its own: bench/run.mjs starts this with a module, the
// name of its exported bench function and that function's options as JSON; the result is written
// to stdout as one line of JSON. `--log` hands the function a `log` that writes to stderr.
//
// Why a process per part: in one process, a part runs on what the parts before it left behind:
// their heap until a timer lets it go (when the dispatcher-ledger bench began, about 90 MB of the
// dispatcher-overhead bench's memory-ledger rows were still live, after a forced collection), the
// type feedback they left on code the parts share (core's dispatcher had met a memory ledger,
// ioredis a Cluster client), and their open handles. A production process runs one ledger; so
// does each part now. (Back to back, the peer bench alone and after the overhead part differed by
// less than one run differs from the next: this removes a confounder, not a measured bias.)
import { pathToFileURL } from "node:url";

const [modulePath, exportName, optionsJson = "{}", ...flags] = process.argv.slice(2);
if (modulePath === undefined || exportName === undefined) {
  process.stderr.write("usage: node bench/isolated.mjs <module> <export> [options as JSON] [--log]\n");
  process.exit(2);
}
const options = JSON.parse(optionsJson);
if (flags.includes("--log")) options.log = (/** @type {string} */ message) => process.stderr.write(`${message}\n`);
const run = (await import(pathToFileURL(modulePath).href))[exportName];
if (typeof run !== "function") throw new Error(`${modulePath} exports no function ${exportName}`);
const result = await run(options);
process.stdout.write(`${JSON.stringify(result)}\n`);
