import { describe, expect, it } from "vitest";
import { RUNNER_PROVIDERS, runEndToEnd } from "../src/index.js";
import type { KitRunner } from "../src/provider.js";
import { SHRINK_BUDGET_MS, expectReadable } from "./readable.js";
import { memory } from "./audit-mutants.js";

/**
 * TURN-20: a runner that does not compare a known message id's content. Before TURN-20 the runner
 * sent a known id's send on to the store, which resolves the id to the message it holds and keeps
 * its first content (TURN-2): "pay acme 999" under an answered message's id was told that message's
 * answer, and under a failed one's it reopened that message and retried its payment. Planted around
 * the real runner: every send of an id goes on with the content the id was first sent with, as the
 * store would keep it (the runner's own check then never sees other content). A case's contents
 * start with its own account, so ids of earlier cases are not mixed up with it.
 */
function answersReusedIdFromTheStore(): (runner: KitRunner) => KitRunner {
  const first = new Map<string, string>();
  return (runner) => ({
    send: (conversationId, message) => {
      const key = `${message.content.split(" ")[0]}\n${conversationId}\n${message.id}`;
      const content = first.get(key) ?? message.content;
      first.set(key, content);
      return runner.send(conversationId, { ...message, content });
    },
  });
}

const SEARCH_BUDGET_MS = 60_000;

describe.each(RUNNER_PROVIDERS)("the end-to-end oracle rejects a runner that answers a reused message id (provider %s)", (provider) => {
  it("TURN-20 a send under an answered or failed message's id with other content is told that message's answer or failure, not refused", async () => {
    const error = await runEndToEnd(memory, { deploys: false,
      provider,
      runs: 100,
      seed: 20261129,
      timeLimitMs: SEARCH_BUDGET_MS,
      shrinkTimeLimitMs: SHRINK_BUDGET_MS,
      runner: answersReusedIdFromTheStore(),
    }).catch((e: unknown) => e);
    const message = expectReadable(error, 20261129);
    expect(message).toMatch(/breaks TURN-20/);
    expect(message).toMatch(/with other content by \S+ \(the message was (answered|failed)\) (was answered|was told the message's failure)/);
  }, 600_000);
});
