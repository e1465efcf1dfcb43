import { describe, expect, it } from "vitest";
import { DeadlineError, withDeadline } from "../src/internal/index.js";

/** The one bound adapters put on a store operation (LEDGER-12, TURN-21). No timing is asserted: only what settles how. */
describe("withDeadline (core/internal)", () => {
  const base = { timeoutMs: 300, waitingFor: "the statement", lateWrite: "a write already sent may still be applied" };

  it("gives the answer that comes before the deadline, and its rejection", async () => {
    await expect(withDeadline(Promise.resolve(7), { ...base, deadline: performance.now() + 60_000 })).resolves.toBe(7);
    const refused = new Error("refused");
    await expect(withDeadline(Promise.reject(refused), { ...base, deadline: performance.now() + 60_000 })).rejects.toBe(refused);
  });

  it("rejects with a DeadlineError naming what it waited for once the deadline has passed, and hands a late answer to late()", async () => {
    let answer!: (value: string) => void;
    const never = new Promise<string>((resolve) => (answer = resolve));
    const late: string[] = [];
    const error = await withDeadline(never, { ...base, deadline: performance.now() - 1, late: (value) => late.push(value) }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DeadlineError);
    expect((error as DeadlineError).code).toBe("DISPATCH_ONCE_TIMEOUT");
    expect((error as Error).message).toBe("no answer within timeoutMs = 300 ms (waiting for the statement); nothing is reported as done (a write already sent may still be applied)");
    answer("the connection");
    await never;
    await new Promise((resolve) => setImmediate(resolve));
    expect(late).toEqual(["the connection"]);
  });
});
