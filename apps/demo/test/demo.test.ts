import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { builtinModules } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Redis } from "ioredis";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { IN_WINDOW, POSITIONS, planTurn, SPLIT } from "../src/chaos.js";
import { DemoUsageError, parseArgs } from "../src/options.js";
import type { DemoResult } from "../src/run.js";
import { wilson } from "../src/stats.js";
import { decodePng, inkStats } from "./png.js";

const APP = fileURLToPath(new URL("..", import.meta.url));
const CLI = join(APP, "dist", "cli.js");
const DATABASE_URL = process.env["DATABASE_URL"] ?? "postgres://postgres@127.0.0.1:5432/test";
const REDIS_URL = process.env["REDIS_URL"] ?? "redis://127.0.0.1:6379";
const CHROMIUM = process.env["CHROMIUM_PATH"] ?? "/usr/bin/chromium";
const RUN = `t${process.pid}_${Date.now().toString(36)}`;

// Small but not trivial: at seed 7, 28 stream failures at every position (5 inside the window),
// 6 lost payments responses (one of them in a turn cut inside the window), and half the messages
// re-worded on a retry. Each run costs about 3.5 s of CPU to start and 35 ms a turn: 240 turns
// (53 failures, 18 lost responses) drew no case that 120 do not, at twice the CPU.
const TURNS = 120;
const RATES = { failureRate: 0.25, dropRate: 0.1, rewordRate: 0.5 };
const SMALL = [
  "--turns", String(TURNS), "--failure-rate", String(RATES.failureRate), "--drop-rate", String(RATES.dropRate),
  "--reword-rate", String(RATES.rewordRate), "--seed", "7", "--time-scale", "0.005",
  "--incident-time-scale", "0.2", "--redeliveries", "8", "--concurrency", "8", "--json",
];

/** What the seed planned for the main route, recomputed here from the plan alone. */
function plannedSmall() {
  let faulted = 0;
  let repeatHazard = 0;
  let lost = 0;
  for (let i = 0; i < TURNS; i++) {
    const plan = planTurn("7", "chaos", i, RATES.failureRate, `T-${i}`, RATES);
    const inWindow = plan.failure !== undefined && IN_WINDOW.has(plan.failure.position);
    if (plan.failure !== undefined || plan.loseResponse) faulted++;
    // A naive handler repeats the payment after a cut inside the window or a lost response.
    if (inWindow || plan.loseResponse) repeatHazard++;
    if (plan.loseResponse) lost++;
  }
  return { faulted, repeatHazard, lost };
}

interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** The routes' "may have happened" statements with their causes, for a failing assertion's message. */
function causes(routes: readonly { name: string; guarded: { mayHaveHappenedExamples: string[] } }[]): string {
  return routes.flatMap((r) => r.guarded.mayHaveHappenedExamples.map((e) => `${r.name} ${e}`)).join("\n");
}

function runCli(args: string[]): Promise<CliRun> {
  return runNode([CLI, ...args]);
}

/** `node` with these arguments, its output collected. */
function runNode(args: string[]): Promise<CliRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { cwd: APP, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

function parseOne(run: CliRun): DemoResult {
  expect(run.code, run.stderr).toBe(0);
  // Exactly one JSON object and nothing else on stdout.
  const lines = run.stdout.split("\n").filter((l) => l !== "");
  expect(lines).toHaveLength(1);
  return JSON.parse(lines[0]!) as DemoResult;
}

/** Whether dist/ was built after the last change to src/ and the build's config. */
function builtFromCurrentSources(): boolean {
  if (!existsSync(CLI)) return false;
  const built = statSync(CLI).mtimeMs;
  const sources = readdirSync(join(APP, "src"), { recursive: true, encoding: "utf8" }).map((f) => join(APP, "src", f));
  const inputs = [...sources, join(APP, "tsup.config.ts"), join(APP, "package.json")];
  return inputs.every((f) => !existsSync(f) || statSync(f).mtimeMs <= built);
}

const tmp = mkdtempSync(join(tmpdir(), "demo-test-"));
const reportPath = join(tmp, "report.html");
const pgSchema = `demo_${RUN}`;
const redisNamespace = `demo_${RUN}`;
let runs: Record<"sqlite" | "postgres" | "redis", DemoResult>;
let openaiRun: DemoResult;
let textRun: CliRun;

beforeAll(async () => {
  // The demo is run as users run it: the built CLI (and its worker thread), built again only when
  // a source is newer than it (turbo's test task builds first; a direct vitest run may not).
  if (!builtFromCurrentSources()) execFileSync("pnpm", ["exec", "tsup"], { cwd: APP, stdio: "ignore", timeout: 180_000 });
  const [sqlite, postgres, redis, text, openai] = await Promise.all([
    runCli([...SMALL, "--report", reportPath]),
    runCli([...SMALL, "--ledger", DATABASE_URL, "--ledger-namespace", pgSchema]),
    runCli([...SMALL, "--ledger", REDIS_URL, "--ledger-namespace", redisNamespace]),
    runCli(["--turns", "60", "--failure-rate", "0.5", "--seed", "7", "--time-scale", "0.005", "--incident-time-scale", "0.05", "--redeliveries", "2"]),
    runCli([...SMALL, "--provider", "openai"]),
  ]);
  textRun = text;
  runs = { sqlite: parseOne(sqlite), postgres: parseOne(postgres), redis: parseOne(redis) };
  openaiRun = parseOne(openai);
  // Five runs at once take 90-190 s here beside other suites; twice that leaves room for a slower
  // host under CI's load, and a run that hangs still fails (each run's stderr is in its assertion).
}, 480_000);

afterAll(() => {
  rmSync(tmp, { recursive: true, force: true });
});

describe("pnpm demo --json, on each ledger", () => {
  for (const ledger of ["sqlite", "postgres", "redis"] as const) {
    it(`${ledger}: the incident pays twice naive and once guarded; the retry's dispatch is replayed from the ledger`, () => {
      const { incident } = runs[ledger];
      expect(runs[ledger].ledger.kind).toBe(ledger);
      expect(incident.naive.payments).toBe(2);
      expect(incident.guarded.payments).toBe(1);
      expect(incident.naive.retryDispatch).toBe("ran_again");
      expect(incident.guarded.retryDispatch).toBe("replayed_from_ledger");
      for (const side of [incident.naive, incident.guarded]) {
        expect(side.failurePosition).toBe("after_dispatch_before_stop");
        // The retried response carries a new toolu_ id: keying on it deduplicates nothing.
        expect(side.callIds).toHaveLength(2);
        expect(side.callIds[0]).not.toBe(side.callIds[1]);
        // The reset landed inside the window by construction: the stream was held where
        // message_stop goes and cut only after the payment was accepted (causal order, not timing).
        const w = side.window!;
        expect(w.dispatchMs).toBeLessThanOrEqual(w.acceptedMs);
        expect(w.acceptedMs).toBeLessThanOrEqual(w.resolvedMs);
        expect(w.resolvedMs).toBeLessThanOrEqual(w.resetMs);
        expect(side.timeline.filter((e) => e.kind === "turn_committed").map((e) => e.attempt)).toEqual([2]);
      }
      expect(incident.naive.idempotencyKeys).toEqual(incident.naive.callIds);
      expect(incident.guarded.idempotencyKeys).toHaveLength(1);
      expect(incident.guarded.idempotencyKeys[0]).toMatch(/^[0-9a-f]{32}$/);
    });

    it(`${ledger}: --json reports what the whole process used (read by pnpm bench --demo-scale)`, () => {
      const usage = runs[ledger].process!;
      expect(usage).toBeDefined();
      // The process started before the run and both phases ran inside it.
      expect(usage.wallMs).toBeGreaterThanOrEqual(runs[ledger].durationMs);
      // Every thread's CPU: at least the run's two sides' streaming work, so well above zero.
      expect(usage.cpuUserMs + usage.cpuSystemMs).toBeGreaterThan(100);
      // ru_maxrss in KiB: a Node process with three threads holds tens of MiB at the least.
      expect(usage.maxRssKiB).toBeGreaterThan(20 * 1024);
      expect(usage.maxRssKiB).toBeLessThan(4 * 1024 * 1024);
      // Each side's own duration lies inside the chaos run's (a time, not a count taken for one).
      const { chaos } = runs[ledger];
      for (const side of [chaos.naive, chaos.guarded]) {
        expect(side.durationMs).toBeGreaterThan(0);
        expect(side.durationMs).toBeLessThanOrEqual(chaos.durationMs);
      }
    });

    it(`${ledger}: the guarded side makes no duplicate and misreports no effect on any route`, () => {
      const { chaos } = runs[ledger];
      expect(chaos.guarded.duplicates).toBe(0);
      expect(chaos.guarded.misreports).toBe(0);
      expect(chaos.guarded.mayHaveHappened, causes(chaos.routes)).toBe(0);
      expect(chaos.guarded.payments).toBe(chaos.turns);
      expect(chaos.guarded.failedTurns).toBe(0);
      // Lost responses happened, as planned; the reconcile probe settled each from the payments
      // API's lookup by key (RECON-3): no re-run POST, and the ledger row completed with the
      // payment, so every repeat was stopped by the ledger alone.
      expect(chaos.guarded.lostResponses).toBe(chaos.planned.lostResponses);
      expect(chaos.guarded.lostResponses).toBeGreaterThan(0);
      expect(chaos.guarded.reconciled).toBe(chaos.guarded.lostResponses);
      expect(chaos.naive.reconciled).toBe(0);
      expect(chaos.guarded.posts).toBe(chaos.turns);
      expect(chaos.guarded.downstreamReplays).toBe(0);
      expect(chaos.guarded.replayedFromLedger).toBe(chaos.failuresInWindow);
      // Re-worded memos reached the dispatcher and were sent as first asked.
      expect(chaos.guarded.rewordedResponses).toBeGreaterThan(0);
      expect(chaos.guarded.requestDiffers).toBeGreaterThan(0);
      for (const route of chaos.routes) {
        expect(route.guarded.duplicates, route.name).toBe(0);
        expect(route.guarded.misreports, route.name).toBe(0);
        expect(route.guarded.payments, route.name).toBe(route.name === "automatic_retry" ? chaos.turns : route.replays);
      }
      const resend = chaos.routes.find((r) => r.name === "client_resend")!;
      // Without the automatic retry a lost response used to fail the turn with "may have
      // happened"; the reconcile probe now settles it from the payments API before the turn
      // fails, so no turn is left telling the user anything but the payment (RECON-3).
      expect(resend.guarded.mayHaveHappened, causes([resend])).toBe(0);
      expect(resend.guarded.mayHaveHappenedAndDid).toBe(0);
      const redelivery = chaos.routes.find((r) => r.name === "queue_redelivery")!;
      expect(redelivery.guarded.posts).toBe(redelivery.guarded.payments);
      expect(chaos.anomalies).toEqual([]);
    });
  }

  it("the naive side repeats every payment after a cut inside the window or a lost response, and misreports each", () => {
    const { chaos } = runs.sqlite;
    const planned = plannedSmall();
    expect(chaos.turns).toBe(TURNS);
    expect(chaos.failuresInWindow).toBeGreaterThan(0);
    expect(chaos.streamFailures).toBeGreaterThan(chaos.failuresInWindow);
    expect(chaos.planned.lostResponses).toBe(planned.lost);
    // A lost response in a turn also cut inside the window (the case 240 turns drew once) is drawn.
    expect(chaos.planned.lostResponsesInWindow).toBeGreaterThan(0);
    // By construction: a failure before dispatch costs a retry; one inside the window, or a lost
    // response, costs a payment (one, when a turn has both).
    expect(chaos.naive.duplicates).toBe(planned.repeatHazard);
    expect(chaos.naive.duplicatesByCause.streamCut).toBe(chaos.failuresInWindow);
    expect(chaos.naive.duplicatesByCause.lostResponse).toBe(planned.lost - chaos.planned.lostResponsesInWindow);
    expect(chaos.naive.payments).toBe(chaos.turns + chaos.naive.duplicates);
    // Each of those messages was answered naming one payment while the effect log has two.
    expect(chaos.naive.misreports).toBe(chaos.naive.duplicates);
    expect(chaos.naive.misreportReasons.two_payments).toBe(chaos.naive.duplicates);
    const route = (name: string) => chaos.routes.find((r) => r.name === name)!;
    expect(route("automatic_retry").replays).toBe(planned.faulted);
    expect(route("automatic_retry").naive.duplicates).toBe(planned.repeatHazard);
    expect(route("client_resend").replays).toBe(planned.faulted);
    expect(route("client_resend").naive.duplicates).toBe(planned.repeatHazard);
    expect(route("client_resend").naive.misreports).toBe(planned.repeatHazard);
    expect(route("client_resend").naive.mayHaveHappened).toBe(planned.lost);
    expect(route("queue_redelivery").replays).toBe(8);
    expect(route("queue_redelivery").naive.duplicates).toBe(8);
    expect(route("queue_redelivery").naive.misreports).toBe(8);
  });

  it("stream failures land where they were planned, at the spec's positions", () => {
    const { chaos } = runs.sqlite;
    expect(Object.keys(chaos.byPosition).sort()).toEqual([...POSITIONS].sort());
    expect(chaos.byPosition).toEqual(chaos.plannedByPosition);
    expect(chaos.naive.byPosition).toEqual(chaos.guarded.byPosition);
    expect(chaos.failuresInWindow).toBe(chaos.byPosition.during_dispatch + chaos.byPosition.after_dispatch_before_stop);
    for (const position of POSITIONS) expect(chaos.byPosition[position], position).toBeGreaterThan(0);
  });

  it("reports the measured rate with its Wilson interval beside the chapter's arithmetic", () => {
    const { chaos } = runs.sqlite;
    expect(chaos.naiveDuplicateRate).toEqual(wilson(chaos.naive.duplicatesByCause.streamCut, chaos.turns));
    expect(chaos.chapter.duplicateRate).toBeCloseTo(0.006 * 0.11, 10);
    expect(chaos.chapter.oneIn).toBe(1515);
    expect(chaos.chapter.atThisFailureRate.duplicateRate).toBeCloseTo(0.25 * 0.11, 10);
  });

  it("is deterministic for a seed: every ledger's run has the same counts", () => {
    const counts = (r: DemoResult) => ({
      incident: [r.incident.naive.payments, r.incident.guarded.payments],
      streamFailures: r.chaos.streamFailures,
      byPosition: r.chaos.byPosition,
      naive: r.chaos.naive.duplicates,
      guarded: r.chaos.guarded.duplicates,
      duplicated: r.chaos.naive.duplicatedReferences,
      lost: [r.chaos.naive.lostResponses, r.chaos.guarded.lostResponses],
      // Not requestDiffers: whether a third response picks the same re-wording as the second
      // depends on the history's payment ids and toolu_ ids, which no seed fixes.
      reworded: [r.chaos.naive.rewordedResponses, r.chaos.guarded.rewordedResponses],
      routes: r.chaos.routes.map((x) => [x.replays, x.naive.duplicates, x.guarded.duplicates, x.naive.misreports, x.guarded.misreports, x.naive.mayHaveHappened, x.guarded.mayHaveHappened]),
    });
    expect(counts(runs.postgres)).toEqual(counts(runs.sqlite));
    expect(counts(runs.redis)).toEqual(counts(runs.sqlite));
    // The seed fixes the plan, not the provider: on the OpenAI Responses API (the real openai SDK
    // against its mock, the naive side in the CLI's worker thread) every count is the same.
    expect(openaiRun.incident.provider).toBe("openai");
    expect(openaiRun.chaos.provider).toBe("openai");
    expect(runs.sqlite.chaos.provider).toBe("anthropic");
    expect(counts(openaiRun)).toEqual(counts(runs.sqlite));
    expect(openaiRun.chaos.guarded.misreports).toBe(0);
    expect(openaiRun.chaos.anomalies).toEqual([]);
  });

  it("says loudly that the Redis ledger is volatile, and uses only a keyed_write tool on it", () => {
    expect(runs.redis.ledger.durability).toBe("volatile");
    expect(runs.redis.ledger.note).toMatch(/VOLATILE/);
    expect(runs.sqlite.ledger.durability).toBe("durable");
    expect(runs.postgres.ledger.durability).toBe("durable");
  });

  it("removes what it created: the PostgreSQL schema and the Redis keys are gone", async () => {
    const pool = new pg.Pool({ connectionString: DATABASE_URL });
    try {
      const { rows } = await pool.query("SELECT 1 FROM pg_namespace WHERE nspname = $1", [pgSchema]);
      expect(rows).toHaveLength(0);
    } finally {
      await pool.end();
    }
    const redis = new Redis(REDIS_URL);
    try {
      const [, keys] = await redis.scan("0", "MATCH", `dispatch-once-demo:${redisNamespace}:*`, "COUNT", 10_000);
      expect(keys).toEqual([]);
    } finally {
      redis.disconnect();
    }
  });
});

describe("what each thread of the built CLI loads (static imports; an import() loads only when a run needs it)", () => {
  const DIST = join(APP, "dist");
  const IMPORT = /(?:^|\n)(?:import|export)\s*(?:[\w$*{}\s,]+?\s*from\s*)?"([^"]+)"/g;
  /** The packages a file and the files it imports statically load, by their specifiers. */
  const packagesLoadedBy = (...entries: string[]): Set<string> => {
    const seen = new Set<string>();
    const packages = new Set<string>();
    const visit = (file: string) => {
      if (seen.has(file)) return;
      seen.add(file);
      for (const [, specifier] of readFileSync(join(DIST, file), "utf8").matchAll(IMPORT)) {
        if (specifier!.startsWith("./")) visit(specifier!.slice(2));
        else packages.add(specifier!);
      }
    };
    for (const entry of entries) visit(entry);
    return packages;
  };
  const lazyChunk = (prefix: string) => {
    const file = readdirSync(DIST).find((f) => f.startsWith(`${prefix}-`) && f.endsWith(".js"));
    expect(file, `dist/${prefix}-*.js`).toBeDefined();
    return file!;
  };

  it("the CLI's own thread, which only starts the run and prints it, loads no package but Node's", () => {
    // It loaded every SDK, mock server and driver through the constants it prints (55 MB of RSS).
    const loaded = [...packagesLoadedBy("cli.js", lazyChunk("text"), lazyChunk("report"))];
    expect(loaded.filter((p) => !p.startsWith("node:") && !builtinModules.includes(p))).toEqual([]);
  });

  it("a side's thread loads the OpenAI and AI SDK stacks and the PostgreSQL and Redis drivers only for a run that uses them", () => {
    for (const entry of ["chaos-worker.js", "demo-thread.js"]) {
      const loaded = packagesLoadedBy(entry);
      expect(loaded, entry).toContain("@anthropic-ai/sdk"); // the closure is followed at all
      for (const lazy of ["openai", "ai", "@ai-sdk/openai", "@dispatch-once/openai", "@dispatch-once/ai-sdk", "@dispatch-once/mock-openai", "pg", "ioredis"]) {
        expect(loaded, `${entry} loads ${lazy}`).not.toContain(lazy);
      }
      expect([...loaded].filter((p) => p.startsWith("@dispatch-once/ledger-")), entry).toEqual([]);
    }
  });
});

describe("the text report", () => {
  it("prints both timelines, the table by position, the rate beside the chapter's arithmetic and every route", () => {
    expect(textRun.code, textRun.stderr).toBe(0);
    const out = textRun.stdout;
    expect(out).toContain("1. THE INCIDENT");
    expect(out).toMatch(/effect log shows 2 payments \(the retry's dispatch ran the tool again\)/);
    expect(out).toMatch(/effect log shows 1 payment \(the retry's dispatch was answered from the ledger\)/);
    for (const position of POSITIONS) expect(out).toContain(position);
    expect(out).toMatch(/DUPLICATE payments\s+\d+\s+0\n/);
    expect(out).toMatch(/MISREPORTED effects\s+\d+\s+0\n/);
    expect(out).toMatch(/told "may have happened" \(truthful\)\s+\d+\s+\d+\n/);
    expect(out).toContain("the payments API loses its response to 0.10 % of first POSTs");
    expect(out).toContain("95 % interval (Wilson)");
    expect(out).toContain("0.006 x 0.11 = 0.00066, about 1 in 1,515 turns");
    expect(out).toContain("0.5 x 0.11 = 0.0550, about 1 in 18");
    // replays, duplicates naive and guarded, misreported naive and guarded.
    expect(out).toMatch(/queue redelivers after a stalled worker\s+2\s+2\s+0\s+2\s+0\s/);
    expect(out).toContain("time scale 0.005");
    expect(out).toMatch(/Finished in \d+\.\d s \(CPU \d+\.\d s, peak RSS \d+ MiB\)\./);
    // Not a terminal: no progress bar redrawn into the log, only the phase lines.
    expect(textRun.stderr).not.toContain("\r");
    expect(textRun.stderr).toContain("Chaos run: 60 turns per side");
  });
});

describe("the process's usage in --json", () => {
  // Linux carries ru_maxrss across execve: a demo spawned by a process holding 700 MB (as `pnpm
  // bench` does after filling a table) once reported that parent's 700 MB as its own peak.
  it.runIf(process.platform === "linux")("is the demo's own peak, not that of the process that spawned it", async () => {
    const tiny = [CLI, "--turns", "10", "--seed", "7", "--time-scale", "0.005", "--incident-time-scale", "0.05", "--redeliveries", "1", "--json"];
    const parent = `
      const held = Buffer.alloc(700 * 2 ** 20, 1);
      const heldRssKiB = Math.round(process.memoryUsage().rss / 1024);
      const child = require("node:child_process").spawn(process.execPath, ${JSON.stringify(tiny)}, { stdio: ["ignore", "pipe", "inherit"] });
      let out = "";
      child.stdout.on("data", (d) => (out += d));
      // held is read here so that it stays alive (and resident) until the demo has ended.
      child.on("close", (code) => process.stdout.write(JSON.stringify({ code, heldRssKiB, held: held.length, demo: JSON.parse(out).process })));
    `;
    const run = await runNode(["-e", parent]);
    expect(run.code, run.stderr).toBe(0);
    const { code, heldRssKiB, demo } = JSON.parse(run.stdout) as { code: number; heldRssKiB: number; demo: { maxRssKiB: number } };
    expect(code).toBe(0);
    // The parent really held its 700 MB when it spawned the demo, so the check below can fail.
    expect(heldRssKiB).toBeGreaterThan(700 * 1024);
    // A small run of the demo peaks near 200 MB; the parent's pages must not be counted.
    expect(demo.maxRssKiB).toBeLessThan(450 * 1024);
  }, 120_000);
});

describe("the HTML report", () => {
  it("is self-contained and renders in headless Chromium", () => {
    if (!existsSync(CHROMIUM)) {
      throw new Error(`Chromium not found at ${CHROMIUM}: install Debian's chromium package or set CHROMIUM_PATH`);
    }
    const html = readFileSync(reportPath, "utf8");
    // Nothing fetched from anywhere: no scripts, no external URLs.
    expect(html).not.toMatch(/<script|<link|src=|@import|url\(/i);
    expect(html).not.toMatch(/https?:\/\/(?!www\.w3\.org\/2000\/svg)/);
    const profile = mkdtempSync(join(tmp, "chromium-"));
    const flags = [
      "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync", `--user-data-dir=${profile}`,
    ];
    // One Chromium start prints the rendered DOM and takes the screenshot (each start costs about
    // 3.5 s of CPU across its processes, so two starts cost twice that for the same page).
    const png = join(tmp, "report.png");
    const dom = execFileSync(CHROMIUM, [...flags, "--dump-dom", `--screenshot=${png}`, "--window-size=1200,900", `file://${reportPath}`], {
      encoding: "utf8",
      timeout: 90_000,
      stdio: ["ignore", "pipe", "ignore"],
    });
    for (const id of ["incident-window", "incident-timeline", "chart-positions", "chart-routes", "chart-rate", "chaos-table", "routes-table"]) {
      expect(dom, id).toContain(`id="${id}"`);
    }
    expect(dom.match(/class="bar position"/g)).toHaveLength(4);
    expect(dom.match(/class="bar naive"/g)).toHaveLength(3);
    expect(dom).toContain('class="window"');
    const image = decodePng(readFileSync(png));
    expect(image.width).toBe(1200);
    const ink = inkStats(image);
    // A blank page has one colour; this one has text, shaded windows and coloured cards.
    expect(ink.colours).toBeGreaterThan(50);
    expect(ink.inkShare).toBeGreaterThan(0.05);
  }, 200_000);
});

describe("bad options exit with code 2 and say what is wrong", () => {
  const cases: Array<[string[], RegExp]> = [
    [["--turns", "0"], /--turns must be between/],
    [["--turns", "many"], /--turns must be a whole number/],
    [["--failure-rate", "1.5"], /--failure-rate must be a number/],
    [["--time-scale", "0"], /--time-scale must be a number/],
    [["--ledger", "mysql://x"], /unsupported scheme/],
    [["--ledger", "sqlite:"], /needs a file path/],
    [["--frobnicate"], /unknown option "--frobnicate"/],
    [["--seed"], /--seed needs a value/],
    [["--json=yes"], /--json takes no value/],
    [["--drop-rate", "-0.1"], /--drop-rate must be a number with 0 <= drop-rate <= 1/],
    [["--reword-rate", "1.5"], /--reword-rate must be a number with 0 <= reword-rate <= 1/],
  ];
  for (const [args, message] of cases) {
    it(args.join(" "), async () => {
      const run = await runCli(args);
      expect(run.code).toBe(2);
      expect(run.stdout).toBe("");
      expect(run.stderr).toMatch(message);
    });
  }

  it("parseArgs raises DemoUsageError with the option's name", () => {
    expect(() => parseArgs(["--concurrency", "0"])).toThrow(DemoUsageError);
    try {
      parseArgs(["--ledger-namespace", "bad-name!"]);
      expect.unreachable();
    } catch (error) {
      expect(error).toMatchObject({ code: "bad_option", option: "--ledger-namespace" });
    }
    // Zero switches an added fault off; the chapter's own rate must stay above zero.
    expect(parseArgs(["--drop-rate", "0", "--reword-rate", "0"])).toMatchObject({ dropRate: 0, rewordRate: 0 });
    expect(() => parseArgs(["--failure-rate", "0"])).toThrow(DemoUsageError);
    expect(parseArgs(["--ledger", "postgres://u@h/db", "--json"])).toMatchObject({
      ledger: { kind: "postgres", url: "postgres://u@h/db" },
      json: true,
      progress: false,
    });
  });
});

describe("the arithmetic", () => {
  it("Wilson's interval matches known values", () => {
    const zero = wilson(0, 10);
    expect(zero.low).toBe(0);
    expect(zero.high).toBeCloseTo(0.2775, 4);
    const seven = wilson(7, 400);
    expect(seven.low).toBeCloseTo(0.0085, 4);
    expect(seven.high).toBeCloseTo(0.03568, 4);
  });

  it("the seeded plan places failures at the chapter's proportions", () => {
    const counts: Record<string, number> = { before_any_call: 0, arguments_streaming: 0, during_dispatch: 0, after_dispatch_before_stop: 0 };
    const n = 100_000;
    let failures = 0;
    for (let i = 0; i < n; i++) {
      const failure = planTurn("arith", "chaos", i, 0.006, `T-${i}`).failure;
      if (failure !== undefined) failures++;
    }
    for (let i = 0; i < n; i++) counts[planTurn("arith", "chaos", i, 1, `T-${i}`).failure!.position]!++;
    // 0.6 % of turns fail (binomial sd ≈ 0.024 %).
    expect(failures / n).toBeGreaterThan(0.0052);
    expect(failures / n).toBeLessThan(0.0068);
    const inWindow = (counts["during_dispatch"]! + counts["after_dispatch_before_stop"]!) / n;
    expect(inWindow).toBeGreaterThan(0.105);
    expect(inWindow).toBeLessThan(0.115);
    expect(counts["during_dispatch"]! / (inWindow * n)).toBeCloseTo(SPLIT.duringDispatchOfWindow, 1);
    expect(planTurn("arith", "chaos", 42, 0.3, "x")).toEqual(planTurn("arith", "chaos", 42, 0.3, "x"));
  });
});
