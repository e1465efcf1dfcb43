import { existsSync, statSync } from "node:fs";
import { resolve } from "node:path";
import type { ConversationStore, Ledger } from "@dispatch-once/core";
import { AdapterMissingError } from "./errors/adapter-missing-error.js";
import { InvalidTargetError } from "./errors/invalid-target-error.js";

/** Where a ledger lives, parsed from a target string. */
export type LedgerTarget =
  | { kind: "sqlite"; path: string }
  | { kind: "postgres"; connectionString: string }
  | { kind: "redis"; url: string };

/**
 * Parse a target: a SQLite file path (`./ledger.db`, or `sqlite:./ledger.db`), a
 * `postgres://` / `postgresql://` URL, or a `redis://` / `rediss://` URL.
 *
 * @example parseTarget("sqlite:./ledger.db") // { kind: "sqlite", path: "/abs/ledger.db" }
 */
export function parseTarget(target: string, cwd: string = process.cwd()): LedgerTarget {
  if (typeof target !== "string" || target.trim() === "") throw new InvalidTargetError(String(target), "the ledger target is empty");
  if (target.startsWith("sqlite:")) {
    const path = target.slice("sqlite:".length).replace(/^\/\/(?=\/)/, "");
    if (path === "") throw new InvalidTargetError(target, "sqlite: needs a file path, e.g. sqlite:./ledger.db");
    return { kind: "sqlite", path: resolve(cwd, path) };
  }
  const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(target)?.[1]?.toLowerCase();
  if (scheme === undefined) return { kind: "sqlite", path: resolve(cwd, target) };
  if (scheme === "postgres" || scheme === "postgresql") return { kind: "postgres", connectionString: target };
  if (scheme === "redis" || scheme === "rediss") return { kind: "redis", url: target };
  throw new InvalidTargetError(
    redact(target),
    `unsupported scheme ${scheme}://: use a SQLite file path (or sqlite:PATH), postgres://..., postgresql://... or redis://...`,
  );
}

/** Where the adapter keeps its rows, when not the default. */
export interface OpenLedgerOptions {
  /**
   * SQLite and PostgreSQL table.
   * @default "dispatch_once_ledger"
   * @example await openLedger("./ledger.db", { table: "tool_calls" })
   */
  table?: string;
  /**
   * PostgreSQL schema.
   * @default "public"
   * @example await openLedger("postgres://localhost:5432/app", { schema: "billing", table: "tool_calls" })
   */
  schema?: string;
  /**
   * Redis key prefix.
   * @default "dispatch-once"
   * @example await openLedger("redis://localhost:6379", { prefix: "billing" })
   */
  prefix?: string;
  /**
   * How long finished rows are kept, as the application configured its ledger (LEDGER-13). Every
   * row this ledger finishes (resolve, and reconcile through it) is kept that long from then, and
   * `sweep` holds back rows claimed within it. Give the application's own value when you write.
   * @default the adapter's default (24 h)
   * @example await openLedger("postgres://localhost:5432/app", { retentionMs: 7 * 24 * 60 * 60 * 1000 })
   */
  retentionMs?: number;
  /**
   * Where adapter warnings go (an evicting Redis policy, ...).
   * @default console.warn
   * @example await openLedger("redis://localhost:6379", { onWarning: (message) => console.error(message) })
   */
  onWarning?: (message: string) => void;
  /**
   * Directory a relative SQLite path is resolved against.
   * @default process.cwd()
   * @example await openLedger("./ledger.db", { cwd: "/srv/app" })
   */
  cwd?: string;
}

export interface OpenedLedger {
  ledger: Ledger;
  target: LedgerTarget;
  /** The target as it may be printed: a URL's password replaced by `***`. */
  display: string;
  /** The retention it was opened with, when one was given (else the adapter's default applies). */
  retentionMs?: number;
}

/**
 * Open the ledger a target names through its adapter package, imported only now: a user installs
 * only the adapter (and driver) for the store they use; a missing one is an AdapterMissingError
 * naming what to install.
 */
export async function openLedger(target: string, options: OpenLedgerOptions = {}): Promise<OpenedLedger> {
  const parsed = parseTarget(target, options.cwd);
  const display = parsed.kind === "sqlite" ? parsed.path : redact(target);
  const warn = options.onWarning ?? ((message: string) => console.warn(message));
  const opened = await openLedgerOf(parsed, display, options, warn);
  return options.retentionMs !== undefined ? { ...opened, retentionMs: options.retentionMs } : opened;
}

async function openLedgerOf(parsed: LedgerTarget, display: string, options: OpenLedgerOptions, warn: (message: string) => void): Promise<OpenedLedger> {
  switch (parsed.kind) {
    case "sqlite": {
      // An operator's typo must not leave an empty ledger behind and report "no rows".
      if (!existsSync(parsed.path)) throw new InvalidTargetError(display, `no SQLite ledger file at ${display}`);
      if (!statSync(parsed.path).isFile()) throw new InvalidTargetError(display, `${display} is not a file`);
      const adapter = await importAdapter(() => import("@dispatch-once/ledger-sqlite"), ["@dispatch-once/ledger-sqlite", "better-sqlite3"], display);
      const ledger = adapter.createSqliteLedger({
        path: parsed.path,
        // Never create or alter a table: a typo in --table, or the wrong file, would otherwise
        // gain an empty ledger and list "0 rows". A missing table is ledger_unavailable naming it.
        migrate: false,
        ...(options.table !== undefined ? { table: options.table } : {}),
        ...(options.retentionMs !== undefined ? { retentionMs: options.retentionMs } : {}),
      });
      return { ledger, target: parsed, display };
    }
    case "postgres": {
      const adapter = await importAdapter(() => import("@dispatch-once/ledger-postgres"), ["@dispatch-once/ledger-postgres", "pg"], display);
      const ledger = adapter.createPostgresLedger({
        connectionString: parsed.connectionString,
        ...(options.schema !== undefined ? { schema: options.schema } : {}),
        ...(options.table !== undefined ? { table: options.table } : {}),
        ...(options.retentionMs !== undefined ? { retentionMs: options.retentionMs } : {}),
      });
      try {
        // Reads the server's settings, so capabilities tell the truth about durability (audit
        // reports it). The CLI never migrates a PostgreSQL ledger: the application owns its schema.
        await ledger.probeDurability();
      } catch (error) {
        await ledger.close().catch(() => {});
        throw error;
      }
      return { ledger, target: parsed, display };
    }
    case "redis": {
      const adapter = await importAdapter(() => import("@dispatch-once/ledger-redis"), ["@dispatch-once/ledger-redis", "ioredis"], display);
      const ledger = await adapter.createRedisLedger({
        url: parsed.url,
        ...(options.prefix !== undefined ? { prefix: options.prefix } : {}),
        ...(options.retentionMs !== undefined ? { retentionMs: options.retentionMs } : {}),
        // An operator reading rows is told about an evicting policy, not refused.
        onUnsafeServer: "warn",
        onWarning: warn,
      });
      return { ledger, target: parsed, display };
    }
  }
}

/** Where the conversation store keeps its tables, when not the default. */
export interface OpenConversationStoreOptions {
  /**
   * Table name prefix (SQLite and PostgreSQL).
   * @default "dispatch_once_"
   * @example await openConversationStore("./conversations.db", { tablePrefix: "support_" })
   */
  tablePrefix?: string;
  /**
   * PostgreSQL schema.
   * @default "public"
   * @example await openConversationStore("postgres://localhost:5432/app", { schema: "chat" })
   */
  schema?: string;
  /**
   * Directory a relative SQLite path is resolved against.
   * @default process.cwd()
   * @example await openConversationStore("./conversations.db", { cwd: "/srv/app" })
   */
  cwd?: string;
}

export interface OpenedConversationStore {
  store: ConversationStore;
  target: LedgerTarget;
  display: string;
}

/**
 * Open the conversation store a target names (a SQLite file or a PostgreSQL URL) through its
 * package, imported only now, like openLedger. There is no Redis conversation store.
 */
export async function openConversationStore(target: string, options: OpenConversationStoreOptions = {}): Promise<OpenedConversationStore> {
  const parsed = parseTarget(target, options.cwd);
  const display = parsed.kind === "sqlite" ? parsed.path : redact(target);
  const prefix = options.tablePrefix !== undefined ? { tablePrefix: options.tablePrefix } : {};
  switch (parsed.kind) {
    case "sqlite": {
      if (!existsSync(parsed.path)) throw new InvalidTargetError(display, `no SQLite conversation store file at ${display}`);
      const adapter = await importAdapter(
        () => import("@dispatch-once/conversation-sqlite"),
        ["@dispatch-once/conversation-sqlite", "better-sqlite3"],
        display,
      );
      // migrate: false, as for the ledger: the wrong file gets no conversation tables.
      return { store: adapter.createSqliteConversationStore({ path: parsed.path, migrate: false, ...prefix }), target: parsed, display };
    }
    case "postgres": {
      const adapter = await importAdapter(() => import("@dispatch-once/conversation-postgres"), ["@dispatch-once/conversation-postgres", "pg"], display);
      const store = new adapter.PostgresConversationStore({
        connectionString: parsed.connectionString,
        ...prefix,
        ...(options.schema !== undefined ? { schema: options.schema } : {}),
      });
      return { store, target: parsed, display };
    }
    case "redis":
      throw new InvalidTargetError(display, "there is no Redis conversation store: give the SQLite file or PostgreSQL URL your runner uses");
  }
}

async function importAdapter<T>(load: () => Promise<T>, packages: readonly string[], display: string): Promise<T> {
  try {
    return await load();
  } catch (error) {
    const code = (error as { code?: unknown } | null)?.code;
    const message = String((error as { message?: unknown } | null)?.message ?? "");
    if (code === "ERR_MODULE_NOT_FOUND" || code === "MODULE_NOT_FOUND") {
      // Name only what is missing: the adapter itself, or the driver it needs.
      const missing = packages.filter((name) => message.includes(`'${name}'`) || message.includes(`"${name}"`));
      throw new AdapterMissingError(missing.length > 0 ? missing : packages, display, { cause: error });
    }
    throw error;
  }
}

/** A URL with its password replaced, for messages and output. */
export function redact(target: string): string {
  try {
    const url = new URL(target);
    if (url.password !== "") url.password = "***";
    return url.toString();
  } catch {
    return target;
  }
}
