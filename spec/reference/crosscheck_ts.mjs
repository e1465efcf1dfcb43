// Confirms the Python-generated vectors against the TypeScript implementation in
// packages/core. Not the project's test suite (packages/core/test runs the vectors);
// a tool for whoever regenerates the vectors.
//
//   node --import tsx spec/reference/crosscheck_ts.mjs            (core sources, via tsx)
//   CORE=/work/main/packages/core/dist/index.js node spec/reference/crosscheck_ts.mjs
import { readFileSync } from "node:fs";
import { fileURLToPath, pathToFileURL } from "node:url";
import { dirname, join } from "node:path";

const here = dirname(fileURLToPath(import.meta.url));
const vectors = join(here, "..", "vectors");
const load = (name) => JSON.parse(readFileSync(join(vectors, name), "utf8"));

const core = process.env.CORE
  ? await import(pathToFileURL(process.env.CORE).href)
  : {
      ...(await import(pathToFileURL(join(here, "../../packages/core/src/canonical.ts")).href)),
      ...(await import(pathToFileURL(join(here, "../../packages/core/src/key.ts")).href)),
      ...(await import(pathToFileURL(join(here, "../../packages/core/src/memory-ledger.ts")).href)),
    };
const { canonicalize, deriveKey, keyMaterial, MemoryLedger } = core;

let passed = 0;
const failures = [];
const notApplicable = [];
const check = (id, ok, detail) => (ok ? passed++ : failures.push(`${id}: ${detail}`));
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

for (const v of load("canonical.json").vectors) {
  const got = canonicalize(v.input);
  check(v.id, got === v.canonical, `got ${got}`);
}

for (const v of load("keys.json").vectors) {
  const got = { c: canonicalize(v.input.args), m: keyMaterial(v.input), k: deriveKey(v.input) };
  check(v.id, got.c === v.canonicalArgs && got.m === v.material && got.k === v.key, JSON.stringify(got));
}

for (const v of load("identity.json").vectors) {
  const projection = Object.fromEntries(v.identity.filter((f) => f in v.args).map((f) => [f, v.args[f]]));
  const key = deriveKey({ ...v.input, args: projection });
  check(v.id, same(projection, v.projection) && key === v.key, `key ${key}`);
}

function pointerSet(root, pointer, make) {
  if (pointer === "") return make(root);
  const tokens = pointer.slice(1).split("/").map((t) => t.replace(/~1/g, "/").replace(/~0/g, "~"));
  let target = root;
  for (const t of tokens.slice(0, -1)) target = target[t];
  target[tokens.at(-1)] = make(root);
  return root;
}
const specials = {
  NaN: () => NaN,
  Infinity: () => Infinity,
  "-Infinity": () => -Infinity,
  undefined_in_array: () => undefined,
  bigint: () => 1n,
  function: () => () => 1,
  date: () => new Date(0),
  cycle: (root) => root,
};
for (const v of load("rejections.json").vectors) {
  const input = structuredClone(v.input);
  if (v.special) input.args = pointerSet(input.args, v.specialPath, specials[v.special]);
  let error;
  try {
    deriveKey(input);
  } catch (e) {
    error = e;
  }
  const want = v.error;
  const ok =
    error !== undefined &&
    error.code === want.code &&
    (want.field === undefined || error.field === want.field) &&
    (want.problem === undefined || error.problem === want.problem) &&
    (want.path === undefined || error.path === want.path);
  check(v.id, ok, error ? `${error.code} ${error.field ?? ""} ${error.problem ?? ""} ${JSON.stringify(error.path)}` : "not rejected");
}

for (const c of load("ledger-transitions.json").cases) {
  let now = 1_000_000;
  const ledger = new MemoryLedger({ now: () => now });
  // A case that calls retire (LEDGER-28), resolve (RESOLVE-1..5) or auditTrail (RESOLVE-7) is not applicable to a ledger that does not offer it.
  const lacks = (op) => ledger.capabilities.supports?.[op] !== true && c.steps.some((s) => s.op === op || (op === "retire" && s.op === "expire_retired"));
  if (lacks("retire") || lacks("resolve") || lacks("auditTrail")) {
    notApplicable.push(c.id);
    continue;
  }
  const problems = [];
  /** When each key's claim ids were last retired, for expire_retired. */
  const retiredAt = new Map();
  for (const [i, step] of c.steps.entries()) {
    if (step.op === "retire") retiredAt.set(step.key, now);
    const where = `step ${i} ${step.op}`;
    const attempt = async (fn) => {
      try {
        await fn();
        return { ok: true };
      } catch (e) {
        return { error: e.code ?? String(e) };
      }
    };
    const compareRow = (row, expect) => {
      for (const [field, value] of Object.entries(expect)) {
        if (field === "outcome") continue;
        if (!same(row?.[field], value)) problems.push(`${where}: ${field} ${JSON.stringify(row?.[field])} != ${JSON.stringify(value)}`);
      }
    };
    switch (step.op) {
      case "claim": {
        let r;
        try {
          r = await ledger.claim({ key: step.key, toolName: "test_tool", effect: step.effect, owner: step.owner, leaseMs: step.leaseMs, request: step.request, claimId: step.claimId });
        } catch (e) {
          // A refused claim (a malformed claim id; a released claim id, proposed LEDGER-27) expects {error}.
          r = { error: e.code ?? String(e) };
        }
        if (step.expect.outcome === undefined || r.error !== undefined) {
          if (!same(r, step.expect)) problems.push(`${where}: ${JSON.stringify(r)}`);
        } else if (r.outcome !== step.expect.outcome) problems.push(`${where}: outcome ${r.outcome}`);
        else if (r.outcome === "claimed") {
          if (r.fence !== step.expect.fence || r.takeover !== step.expect.takeover) problems.push(`${where}: ${JSON.stringify(r)}`);
          // LEDGER-21: the claimed result carries the row's stored request, byte for byte.
          if (step.expect.request !== undefined && r.request !== step.expect.request) problems.push(`${where}: request ${JSON.stringify(r.request)} != ${JSON.stringify(step.expect.request)}`);
        } else compareRow(r.row, step.expect);
        break;
      }
      case "complete":
      case "fail":
      case "markUnknown":
      case "release":
      case "renew": {
        const arg =
          step.op === "complete"
            ? step.resultRepeat
              ? `"${step.resultRepeat.char.repeat(step.resultRepeat.count)}"`
              : step.result
            : step.op === "fail"
              ? step.error
              : step.op === "markUnknown"
                ? step.reason
                : step.leaseMs;
        const r = await attempt(() => ledger[step.op](step.key, step.fence, arg));
        if (!same(r, step.expect)) problems.push(`${where}: ${JSON.stringify(r)}`);
        break;
      }
      case "retire": {
        // LEDGER-28; a ledger whose supports.retire is not true would skip the case (MemoryLedger has it).
        let r;
        try {
          r = await ledger.retire(step.key, step.claimId, step.options);
        } catch (e) {
          r = { error: e.code ?? String(e) };
        }
        if (!same(r, step.expect)) problems.push(`${where}: ${JSON.stringify(r)}`);
        break;
      }
      case "resolve": {
        // {key, ...resolveRequest} as given; resultRepeat makes resolution.result.
        const request = { key: step.key, ...structuredClone(step.resolveRequest) };
        if (step.resultRepeat) request.resolution.result = `"${step.resultRepeat.char.repeat(step.resultRepeat.count)}"`;
        let r;
        try {
          r = { outcome: "resolved", ...(await ledger.resolve(request)) };
        } catch (e) {
          r = { error: e.code ?? String(e), state: e.state, field: e.field };
          if (e.code === "resolution_refused" && e.key !== step.key) problems.push(`${where}: resolution_refused carries key ${JSON.stringify(e.key)}`);
        }
        if (step.expect.outcome !== undefined && r.outcome !== undefined) compareRow(r, step.expect);
        else if (step.expect.outcome !== undefined || r.outcome !== undefined || Object.entries(step.expect).some(([f, v]) => !same(r[f], v))) {
          problems.push(`${where}: ${JSON.stringify(r)} != ${JSON.stringify(step.expect)}`);
        }
        break;
      }
      case "auditTrail": {
        // RESOLVE-7: as many entries, in order, the named members equal, `at` never decreasing.
        const entries = await ledger.auditTrail(step.key);
        const want = step.expect.entries;
        if (entries.length !== want.length) problems.push(`${where}: ${JSON.stringify(entries)}`);
        for (const [n, entry] of entries.entries()) {
          for (const [field, value] of Object.entries(want[n] ?? {})) if (!same(entry[field], value)) problems.push(`${where} entry ${n}: ${field} ${JSON.stringify(entry[field])}`);
          if (typeof entry.at !== "number" || (n > 0 && entry.at < entries[n - 1].at)) problems.push(`${where} entry ${n}: at ${entry.at}`);
        }
        break;
      }
      case "expire_retired": {
        // One clock: the retention from the last retire has passed (retire's time plus the default retention).
        now = Math.max(now, (retiredAt.get(step.key) ?? now - 24 * 60 * 60 * 1000) + 24 * 60 * 60 * 1000);
        break;
      }
      case "lookup": {
        const row = await ledger.lookup(step.key);
        if (step.expect.absent) {
          if (row !== undefined) problems.push(`${where}: expected absent, got ${row.state}`);
        } else compareRow(row, step.expect);
        break;
      }
      case "expire_lease": {
        const row = await ledger.lookup(step.key);
        if (row?.state !== "in_flight") problems.push(`${where}: no in-flight row`);
        else now = Math.max(now, row.leaseExpiresAt);
        break;
      }
      case "expire_retention": {
        const row = await ledger.lookup(step.key);
        // Absent: an earlier clock advance already passed this row's retention too.
        if (row?.state === "in_flight") problems.push(`${where}: row is in flight`);
        else if (row !== undefined) now = Math.max(now, row.finishedAt + 24 * 60 * 60 * 1000);
        break;
      }
      case "sweep": {
        const removed = await ledger.sweep();
        if (removed !== step.expect.removed) problems.push(`${where}: removed ${removed}`);
        break;
      }
      default:
        problems.push(`${where}: unknown op`);
    }
  }
  check(c.id, problems.length === 0, problems.join("; "));
}

for (const f of failures) console.log(`FAIL ${f}`);
if (notApplicable.length > 0) console.log(`not applicable (the ledger does not offer retire, resolve or auditTrail): ${notApplicable.join(", ")}`);
console.log(`${passed} passed, ${failures.length} failed`);
process.exit(failures.length === 0 ? 0 : 1);
