import type { ParseArgsConfig } from "node:util";
import type { Ledger } from "@dispatch-once/core";
import { parseCount, parseDuration } from "./duration.js";
import { UsageError } from "./errors/usage-error.js";
import { openLedger, parseTarget, type LedgerTarget, type OpenedLedger } from "./target.js";

/** Where the CLI reads its environment and writes its output; the bin passes the process's. */
export interface CliIo {
  /** Receives whole lines of output (each ends with "\n"). */
  stdout: (text: string) => void;
  /** Receives diagnostics and errors. */
  stderr: (text: string) => void;
  env: Record<string, string | undefined>;
  /** Directory relative paths (SQLite files, tools modules) are resolved against. */
  cwd: string;
}

export type OptionSpecs = NonNullable<ParseArgsConfig["options"]>;
export type OptionValues = Record<string, string | boolean | (string | boolean)[] | undefined>;

/** One `dispatch-once` command. */
export interface Command {
  name: string;
  /** One line for the command list. */
  summary: string;
  /** The full `--help` text. */
  help: string;
  options: OptionSpecs;
  /** Positional arguments it takes, [min, max]. */
  positionals: [number, number];
  /**
   * How the command takes `--retention` (RETENTION_OPTION): "required" for a command that finishes
   * rows (it refuses to write without knowing how long the application keeps them), "optional" for
   * one whose writes do not set a deadline (sweep). Absent: the command does not take it.
   */
  retention?: "required" | "optional";
  run(context: CommandContext): Promise<number>;
}

export interface CommandContext {
  io: CliIo;
  values: OptionValues;
  positionals: string[];
  command: string;
  /** Open the ledger named by --ledger (or DISPATCH_ONCE_LEDGER); closed by the runner afterwards. */
  ledger(): Promise<OpenedLedger>;
}

/** Options every command that opens a ledger accepts. */
export const LEDGER_OPTIONS: OptionSpecs = {
  ledger: { type: "string", short: "l" },
  table: { type: "string" },
  schema: { type: "string" },
  prefix: { type: "string" },
};

export const LEDGER_HELP = `Ledger options:
  -l, --ledger <target>  The ledger: a SQLite file (./ledger.db or sqlite:./ledger.db),
                         postgres://... / postgresql://..., or redis://...
                         Default: the DISPATCH_ONCE_LEDGER environment variable.
      --table <name>     SQLite / PostgreSQL table (default dispatch_once_ledger)
      --schema <name>    PostgreSQL schema (default public)
      --prefix <prefix>  Redis key prefix (default dispatch-once)`;

/** The option every command that writes takes: the application's retention of finished rows. */
export const RETENTION_OPTION: OptionSpecs = { retention: { type: "string" } };

/**
 * The shortest retention a command that finishes rows accepts: a resolved row is forgotten when
 * it passes, and a replay after that runs the effect again, so "7m" typed for "7d" must not go
 * through (the Redis ledger's own floor, MIN_RETENTION_MS).
 */
export const MIN_WRITE_RETENTION_MS = 3_600_000;

/**
 * The retention a command opens the ledger with: `--retention`, else DISPATCH_ONCE_RETENTION.
 * A command that finishes rows (resolve, reconcile) refuses to run without one and refuses one
 * under MIN_WRITE_RETENTION_MS; undefined for a command that does not take it, or sweep without
 * one (the adapter's default).
 */
export function retentionOf(command: Command, values: OptionValues, env: CliIo["env"]): number | undefined {
  if (command.retention === undefined) return undefined;
  const given = stringOption(values, "retention");
  const fromEnv = env["DISPATCH_ONCE_RETENTION"];
  const text = given ?? (fromEnv !== undefined && fromEnv.trim() !== "" ? fromEnv : undefined);
  const source = given !== undefined ? "--retention" : "DISPATCH_ONCE_RETENTION";
  if (text === undefined) {
    if (command.retention === "optional") return undefined;
    throw new UsageError(
      "--retention <age> is required: how long your application's ledger keeps finished rows (its retentionMs), " +
        "e.g. --retention 7d, or set DISPATCH_ONCE_RETENTION. The row this command finishes is kept that long from now; " +
        "a shorter one than the application's lets a replay after it run the effect again",
      command.name,
    );
  }
  const ms = parseDuration(text, source, command.name);
  if (command.retention === "required" && ms < MIN_WRITE_RETENTION_MS) {
    throw new UsageError(
      `${source} must be at least 1h, not ${JSON.stringify(text.trim())}: the row this command finishes would be forgotten ` +
        "then, and a later replay would run its effect again (minutes? days?)",
      command.name,
    );
  }
  return ms;
}

/** `--retention` in the help of a command that finishes rows (resolve, reconcile). */
export const RETENTION_HELP = `Retention (required):
      --retention <age>  how long your application's ledger keeps finished rows: its retentionMs
                         (LEDGER-13), e.g. 7d. The row this command finishes is kept that long
                         from now; a replay after that runs the effect again, so never give less
                         than the application's (at least 1h). Default: the
                         DISPATCH_ONCE_RETENTION environment variable; without either the
                         command is refused (exit 2) before the ledger is opened.`;

/**
 * The `<key>` argument, exactly as given (a ledger compares keys exactly, LEDGER-30). An empty one
 * is refused here: stores disagree about it (one refuses it, others find no row).
 */
export function keyArgument(positionals: readonly string[], command: string): string {
  const key = positionals[0] ?? "";
  if (key === "") throw new UsageError("the key is empty: give the row's key, as `list` prints it", command);
  return key;
}

export function stringOption(values: OptionValues, name: string): string | undefined {
  const value = values[name];
  return typeof value === "string" ? value : undefined;
}

/**
 * The options every listing shares: `--conversation`, `--older-than`, `--limit` (0 = all) and
 * `--page-size` (at most the store's page limit), parsed and checked once.
 */
export function listingOptions(
  values: OptionValues,
  command: string,
  defaults: { limit: number; maxPageSize: number },
): { conversationId?: string; olderThanMs?: number; limit: number; pageSize: number; json: boolean } {
  const conversationId = stringOption(values, "conversation");
  const olderThan = stringOption(values, "older-than");
  const limitText = stringOption(values, "limit");
  const pageText = stringOption(values, "page-size");
  const pageSize = pageText === undefined ? defaults.maxPageSize : parseCount(pageText, "--page-size", command, 1);
  if (pageSize > defaults.maxPageSize) throw new UsageError(`--page-size is at most ${defaults.maxPageSize}`, command);
  return {
    ...(conversationId !== undefined ? { conversationId } : {}),
    ...(olderThan !== undefined ? { olderThanMs: parseDuration(olderThan, "--older-than", command) } : {}),
    limit: limitText === undefined ? defaults.limit : parseCount(limitText, "--limit", command),
    pageSize,
    json: values["json"] === true,
  };
}

const STORE_NAMES: Record<LedgerTarget["kind"], string> = { sqlite: "SQLite", postgres: "PostgreSQL", redis: "Redis" };

/**
 * Refuse an option the target's store does not take (`--table` on Redis, `--prefix` on SQLite, ...):
 * ignored, it would send the operator to the default table or prefix, another application's rows
 * or none, without a word.
 */
export function checkTargetOptions(
  kind: LedgerTarget["kind"],
  values: OptionValues,
  applies: Partial<Record<LedgerTarget["kind"], readonly string[]>>,
  what: string,
  command: string,
): void {
  const taken = applies[kind] ?? [];
  const all = new Set(Object.values(applies).flat());
  for (const option of all) {
    if (values[option] !== undefined && !taken.includes(option)) {
      const alternatives = taken.length > 0 ? ` (it takes ${taken.map((o) => `--${o}`).join(", ")})` : "";
      throw new UsageError(`--${option} does not apply to a ${STORE_NAMES[kind]} ${what}${alternatives}`, command);
    }
  }
}

/** The ledger options each store takes. */
const LEDGER_TARGET_OPTIONS = { sqlite: ["table"], postgres: ["schema", "table"], redis: ["prefix"] } as const;

/** A ledger opener that remembers what it opened, so the runner closes it whatever happens. */
export function ledgerOpener(io: CliIo, values: OptionValues, command: Command): { open: () => Promise<OpenedLedger>; close: () => Promise<void> } {
  let opened: Promise<OpenedLedger> | undefined;
  return {
    open: () => {
      opened ??= (async () => {
        const target = stringOption(values, "ledger") ?? io.env["DISPATCH_ONCE_LEDGER"];
        if (target === undefined || target === "") {
          throw new UsageError("no ledger: pass --ledger <target> or set DISPATCH_ONCE_LEDGER", command.name);
        }
        checkTargetOptions(parseTarget(target, io.cwd).kind, values, LEDGER_TARGET_OPTIONS, "ledger", command.name);
        // Checked here, before anything is connected to: a command that finishes rows does not
        // write without knowing how long the application keeps them.
        const retentionMs = retentionOf(command, values, io.env);
        const table = stringOption(values, "table");
        const schema = stringOption(values, "schema");
        const prefix = stringOption(values, "prefix");
        return openLedger(target, {
          cwd: io.cwd,
          onWarning: (message) => io.stderr(`warning: ${message}\n`),
          ...(table !== undefined ? { table } : {}),
          ...(schema !== undefined ? { schema } : {}),
          ...(prefix !== undefined ? { prefix } : {}),
          ...(retentionMs !== undefined ? { retentionMs } : {}),
        });
      })();
      return opened;
    },
    close: async () => {
      if (opened === undefined) return;
      const ledger: Ledger | undefined = await opened.then((o) => o.ledger).catch(() => undefined);
      await ledger?.close();
    },
  };
}

/**
 * Whether the ledger provides an OPTIONAL method: its `capabilities.supports` flag says so and
 * the method is there (a flag is how the contract announces it; the check of the function keeps
 * an adapter that sets the flag without the method from crashing the CLI).
 */
export function supports(ledger: Ledger, feature: "listRows" | "resolve" | "auditTrail"): boolean {
  return ledger.capabilities.supports?.[feature] === true && typeof ledger[feature] === "function";
}
