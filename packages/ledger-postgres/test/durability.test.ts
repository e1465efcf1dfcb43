// LEDGER-14: the PostgreSQL ledger decides its declared durability from the server settings its
// sessions see (durability: "probe", the default), and the dispatcher then refuses
// unkeyed_write tools on a ledger that can lose acknowledged rows.
import { createRequire } from "node:module";
import { Dispatcher, defineTool, isDispatchOnceError, type ToolDefinition } from "@dispatch-once/core";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PostgresLedger } from "../src/index.js";
import { DATABASE_URL, adminPool, dropSchema, uniqueSchema } from "./helpers.js";

// zod is core's dependency (tools take a zod schema); this package does not depend on it.
const { z } = createRequire(createRequire(import.meta.url).resolve("@dispatch-once/core"))("zod") as {
  z: { object(shape: Record<string, unknown>): ToolDefinition["input"]; number(): unknown };
};

let admin: pg.Pool;
const schemas: string[] = [];
const closers: (() => Promise<void>)[] = [];

beforeAll(() => {
  admin = adminPool(4);
});

afterAll(async () => {
  for (const close of closers) await close();
  for (const schema of schemas) await dropSchema(admin, schema);
  await admin.end();
});

function schema(): string {
  const made = uniqueSchema("durab");
  schemas.push(made);
  return made;
}

function own(options: ConstructorParameters<typeof PostgresLedger>[0]): PostgresLedger {
  const ledger = new PostgresLedger(options);
  closers.push(() => ledger.close());
  return ledger;
}

const invoice = defineTool({ name: "create_invoice", effect: "unkeyed_write", input: z.object({ amount: z.number() }), run: () => ({ id: 1 }) });
const payment = defineTool({ name: "send_payment", effect: "keyed_write", input: z.object({ amount: z.number() }), run: () => ({ id: 2 }) });

function durabilityMismatch(make: () => unknown): unknown {
  try {
    make();
  } catch (error) {
    return error;
  }
  return undefined;
}

const ASYNC_COMMIT = "-c synchronous_commit=off";

describe("LEDGER-14: durability probed by default", () => {
  it("synchronous_commit=off on the ledger's own sessions: migrate() probes, the ledger declares volatile, the dispatcher refuses unkeyed_write tools", async () => {
    const ledger = own({ connectionString: DATABASE_URL, schema: schema(), poolConfig: { options: ASYNC_COMMIT } });
    await ledger.migrate();
    expect(ledger.capabilities.durability).toBe("volatile");
    const probe = await ledger.probeDurability();
    expect(probe).toMatchObject({ durable: false, declared: "volatile", settings: { synchronousCommit: "off", fsync: "on" } });
    expect(probe.reasons).toEqual([expect.stringContaining("synchronous_commit is off")]);
    const error = durabilityMismatch(() => new Dispatcher({ tools: [invoice, payment], ledger }));
    expect(isDispatchOnceError(error, "durability_mismatch"), String(error)).toBe(true);
    expect((error as { tools?: string[] }).tools).toEqual(["create_invoice"]);
    // keyed_write tools are fine on it: the downstream key covers a lost row.
    expect(() => new Dispatcher({ tools: [payment], ledger })).not.toThrow();
  });

  it("the server's defaults (fsync, synchronous_commit, full_page_writes on): migrate() probes, durable, unkeyed_write tools accepted", async () => {
    const ledger = own({ connectionString: DATABASE_URL, schema: schema() });
    await ledger.migrate();
    expect(ledger.capabilities.durability).toBe("durable");
    expect(() => new Dispatcher({ tools: [invoice, payment], ledger })).not.toThrow();
  });

  it("before any probe the durability is unknown and declared volatile; probeDurability() alone decides it (a brought pool)", async () => {
    const s = schema();
    await new PostgresLedger({ pool: admin, schema: s, durability: "volatile" }).migrate();
    const durablePool = new PostgresLedger({ pool: admin, schema: s });
    expect(durablePool.capabilities.durability).toBe("volatile");
    const unprobed = durabilityMismatch(() => new Dispatcher({ tools: [invoice], ledger: durablePool }));
    expect(isDispatchOnceError(unprobed, "durability_mismatch")).toBe(true);
    // The message names the likely cause: the probe has not run yet.
    expect((unprobed as Error).message).toMatch(/declares "volatile" until migrate\(\) or probeDurability\(\) has run/);
    expect(await durablePool.probeDurability()).toMatchObject({ durable: true, declared: "durable" });
    expect(durablePool.capabilities.durability).toBe("durable");

    const asyncPool = new pg.Pool({ connectionString: DATABASE_URL, max: 1, options: ASYNC_COMMIT });
    closers.push(() => asyncPool.end());
    const asyncLedger = new PostgresLedger({ pool: asyncPool, schema: s });
    expect(await asyncLedger.probeDurability()).toMatchObject({ durable: false, declared: "volatile" });
    expect(asyncLedger.capabilities.durability).toBe("volatile");
  });

  it("an explicit durability overrides the probe: probeDurability() then only reports", async () => {
    const asyncDeclaredDurable = own({ connectionString: DATABASE_URL, schema: schema(), durability: "durable", poolConfig: { options: ASYNC_COMMIT } });
    await asyncDeclaredDurable.migrate();
    expect(asyncDeclaredDurable.capabilities.durability).toBe("durable");
    expect(await asyncDeclaredDurable.probeDurability()).toMatchObject({ durable: false, declared: "durable" });
    expect(asyncDeclaredDurable.capabilities.durability).toBe("durable");

    const declaredVolatile = own({ connectionString: DATABASE_URL, schema: schema(), durability: "volatile" });
    await declaredVolatile.migrate();
    expect(await declaredVolatile.probeDurability()).toMatchObject({ durable: true, declared: "volatile" });
    expect(declaredVolatile.capabilities.durability).toBe("volatile");
  });

  it("the capabilities object a caller holds never changes under it (a probe replaces it)", async () => {
    const ledger = own({ connectionString: DATABASE_URL, schema: schema() });
    const before = ledger.capabilities;
    await ledger.migrate();
    expect(before.durability).toBe("volatile");
    expect(Object.isFrozen(before)).toBe(true);
    expect(ledger.capabilities).not.toBe(before);
    expect(ledger.capabilities).toMatchObject({ durability: "durable", clock: "store", sharedAcrossProcesses: true });
  });
});
