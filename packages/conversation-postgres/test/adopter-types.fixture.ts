// What an adopter's strict app writes; adopter-types.test.ts type-checks it with
// exactOptionalPropertyTypes on, as a strict app (and tests/pack-install) compiles.
import { createPostgresLedger, type PostgresLedger } from "@dispatch-once/ledger-postgres";
import { PostgresConversationStore } from "../src/index.js";

// The README's Usage (this package's and the ledger's): the connection string straight from the
// environment, string | undefined.
export const storeFromEnvironment = (): PostgresConversationStore => new PostgresConversationStore({ connectionString: process.env.DATABASE_URL });
export const ledgerFromEnvironment = (): PostgresLedger => createPostgresLedger({ connectionString: process.env.DATABASE_URL });

// A pg.Pool typed by another @types/pg version than the one this package's types were built on:
// only members every pg 8 pool has (an older ClientBase lacks getTransactionStatus, which made
// `pool: pg.Pool` refuse it with TS2375 while the ledger beside it accepted the same pool).
declare const poolOfAnotherTypesPg: {
  connect(): Promise<{ query(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>; release(error?: Error | boolean): void }>;
  query(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
  end(): Promise<void>;
  readonly totalCount: number;
  readonly idleCount: number;
  readonly waitingCount: number;
};
export const fromAnotherPool = (): PostgresConversationStore => new PostgresConversationStore({ pool: poolOfAnotherTypesPg });
