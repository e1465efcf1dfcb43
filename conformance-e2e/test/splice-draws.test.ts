import { createHash } from "node:crypto";
import fc from "fast-check";
import { valueAtPath } from "@dispatch-once/conformance/ledger";
import { describe, expect, it } from "vitest";
import { aiSdkScenarioArbitrary, messagesOf, withoutCrossTurnRepeats, withoutTabs, type AiSdkScenario } from "../src/ai-sdk-scenario.js";
import { scenarioArbitrary, withoutDeferral, withoutDeploy, withoutRepeat, type Scenario } from "../src/scenario.js";

/**
 * The splices are drawn after every other field of a scenario (`splices`, the record's last
 * member): fast-check draws a record's members in order from one random stream, and each run of a
 * seed from its own, so every earlier field of a seed's scenarios, at every run and along a
 * shrinking path, is what it was before the field came. The hashes are of scenarios the
 * arbitrary of before (commit 3e1465f) drew; a scenario drawn now, its splices taken out, must
 * hash the same. A new draw put before an existing one (or a splice that changed another field)
 * fails here. The draws after the splices (`bareSplices`, `followUpSplices`, `reaskSplices`) are
 * taken out too: the whole scenarios below, each bare splice read as headless and without the
 * follow-up's and the re-asks' splices, are the ones drawn before them; and the whole scenarios
 * without the re-asks' splices are the ones drawn before those (commit 2394294).
 */
const BEFORE: Record<number, string[]> = {
  5: ["e1684767f2897c40", "b6734d32a43f80cb", "932cd85b9afab53a", "857b06cbfd1b4e4d", "773800e8cbd933e2", "e363229729e7aad1"],
  777: ["c4be6378ba967061", "f6475026bef68a4a", "ce5c3bff63265f22", "f680f52a6ac3e86c", "11426f9ffff58420", "da71fffe8dfef38d"],
  20261129: ["95da7e5ebf821920", "f5000e0407d69c89", "04e0dd854b2caabc", "b95cccfcd6b0b8f1", "89b8f9983c492d22", "08adcd9a8b474c8a"],
  20261201: ["604efa062f71a355", "85b87323d804bd1f", "97f0f57f566c1bbc", "61d99d0255ff1295", "5bce6f1a4e9b1715", "d0e22707bec6f938"],
};

/** Paths the kit's tests replay, one through 35 levels of shrinking (e2e-recovery.test.ts). */
const PATHS_BEFORE: [number, string, string][] = [
  [1394139834, "149:4:0:0:0:0:0:0:0:0:0:0:0:135:2:2:6:6:6:6:6:6:6:6:6:6:6:6:7:6:7:7:7:7:7:7", "d0d8a6ca9346434e"],
  [5, "11:26:0", "fa3af9fbded5fd0a"],
  [4, "102", "0e53ec39e9e7062e"],
];

/**
 * The same scenarios whole, splices included, as the arbitrary of before the bare splices (commit
 * b9eb2af) drew them: `bareSplices`, drawn after the splices, only turns some headless splices
 * `headless_bare`, so a scenario drawn now, each bare splice read as headless, must hash the same.
 */
const WITH_SPLICES_BEFORE_BARE: Record<number, string[]> = {
  5: ["e1684767f2897c40", "b6734d32a43f80cb", "932cd85b9afab53a", "857b06cbfd1b4e4d", "8a3bb2c3cdade1d9", "1534ff89a34e57a4"],
  777: ["c4be6378ba967061", "f6475026bef68a4a", "ce5c3bff63265f22", "a78b770a69686995", "3db31b4d7cf9dc47", "da71fffe8dfef38d"],
  20261129: ["62ef4996a2a7c6c1", "f5000e0407d69c89", "04e0dd854b2caabc", "b95cccfcd6b0b8f1", "17e93980d4af8d92", "c2800569d4a5414e"],
  20261201: ["604efa062f71a355", "0ae4b46943b3be79", "97f0f57f566c1bbc", "61d99d0255ff1295", "e5d07276c9382243", "d0e22707bec6f938"],
};
const PATHS_WITH_SPLICES_BEFORE_BARE: Record<string, string> = {
  "1394139834 149:4:0:0:0:0:0:0:0:0:0:0:0:135:2:2:6:6:6:6:6:6:6:6:6:6:6:6:7:6:7:7:7:7:7:7": "bd71b22c09ec0426",
  "5 11:26:0": "fa3af9fbded5fd0a",
  "4 102": "31f3e66a59852a89",
};

/**
 * The same scenarios whole, every splice included, as the arbitrary of before the re-asks' splices
 * (commit 2394294) drew them: `reaskSplices`, drawn after every other field, only adds
 * `reaskSplice`, so a scenario drawn now without it must hash the same.
 */
const WITH_SPLICES_BEFORE_REASK: Record<number, string[]> = {
  5: ["e1684767f2897c40", "b6734d32a43f80cb", "932cd85b9afab53a", "857b06cbfd1b4e4d", "8a3bb2c3cdade1d9", "1534ff89a34e57a4"],
  777: ["c4be6378ba967061", "f6475026bef68a4a", "ce5c3bff63265f22", "a78b770a69686995", "3db31b4d7cf9dc47", "da71fffe8dfef38d"],
  20261129: ["62ef4996a2a7c6c1", "f5000e0407d69c89", "04e0dd854b2caabc", "b95cccfcd6b0b8f1", "17e93980d4af8d92", "c2800569d4a5414e"],
  20261201: ["8a523dee8fde5e6d", "0ae4b46943b3be79", "97f0f57f566c1bbc", "61d99d0255ff1295", "e87e0aab1aa1d397", "d0e22707bec6f938"],
};
const PATHS_WITH_SPLICES_BEFORE_REASK: Record<string, string> = {
  "1394139834 149:4:0:0:0:0:0:0:0:0:0:0:0:135:2:2:6:6:6:6:6:6:6:6:6:6:6:6:7:6:7:7:7:7:7:7": "bd71b22c09ec0426",
  "5 11:26:0": "fa3af9fbded5fd0a",
  "4 102": "228bf19a5c3aad7d",
};

type MessagePlan = Scenario["conversations"][number]["messages"][number];

/** A scenario's first 16 hex digits of SHA-256 over its JSON. */
const digest = (scenario: unknown) => createHash("sha256").update(JSON.stringify(scenario)).digest("hex").slice(0, 16);

/**
 * `scenario` with each message plan as `project` makes it (a copy: the scenario is not changed).
 * The deferrals (`deferrals`, MessagePlan `deferred`), the deploys drawn after them (`deploys`,
 * MessagePlan `deploy`) and the relays' repeats drawn after those (`repeats`, SplicePlan `repeat`
 * as a message's `splice`), drawn after every other field, are taken out first (withoutDeferral,
 * withoutDeploy, withoutRepeat): none of the scenarios of before had one.
 */
function mapPlans(scenario: Scenario, project: (plan: MessagePlan) => MessagePlan): Scenario {
  return { ...scenario, conversations: scenario.conversations.map((c) => ({ ...c, messages: c.messages.map((m) => project(withoutDeferral(withoutDeploy(withoutRepeat({ ...m }))))) })) };
}

/** Without the re-asks' splices: as the arbitrary of before them drew it. */
const beforeReaskHash = (scenario: Scenario) =>
  digest(
    mapPlans(scenario, (plan) => {
      delete plan.reaskSplice;
      return plan;
    }),
  );

/**
 * Each bare splice read as the headless one it was drawn as; the follow-up's and the re-asks'
 * splices, drawn after these (`followUpSplices`, `reaskSplices`), taken out: not in the scenarios of before.
 */
const wholeHash = (scenario: Scenario) =>
  digest(
    mapPlans(scenario, (plan) => {
      delete plan.followUpSplice;
      delete plan.reaskSplice;
      return plan.splice?.shape === "headless_bare" ? { ...plan, splice: { ...plan.splice, shape: "headless" as const } } : plan;
    }),
  );

/** Without any splice: as the arbitrary of before the splices drew it. */
const hash = (scenario: Scenario) =>
  digest(
    mapPlans(scenario, (plan) => {
      delete plan.splice;
      delete plan.followUpSplice;
      delete plan.reaskSplice;
      return plan;
    }),
  );

/** Every scenario the tests below drew, for the last one. */
const drawn: Scenario[] = [];

describe("splices are drawn last: every earlier draw of a seed stays", () => {
  it.each(Object.keys(BEFORE).map(Number))("seed %i: the first six runs' scenarios, splices taken out, are the ones drawn before", (seed) => {
    const now = fc.sample(scenarioArbitrary(), { seed, numRuns: BEFORE[seed]!.length });
    drawn.push(...now);
    expect(now.map(hash), `seed ${seed}: an earlier field of these scenarios changed (a draw put before an existing one?)`).toEqual(BEFORE[seed]);
  });

  it.each(PATHS_BEFORE)("seed %i, path %s: the scenario at a shrinking path, splices taken out, is the one drawn before", async (seed, path, before) => {
    const now = await valueAtPath(scenarioArbitrary(), seed, path);
    drawn.push(now);
    expect(hash(now), `seed ${seed}, path ${path}: an earlier field of this scenario changed`).toBe(before);
  });

  it("the scenarios above do draw splices (the hashes compare scenarios the field changed)", () => {
    expect(drawn).toHaveLength(Object.values(BEFORE).flat().length + PATHS_BEFORE.length);
    const spliced = drawn.flatMap((s) => s.conversations.flatMap((c) => c.messages.filter((m) => m.splice !== undefined)));
    expect(spliced.length).toBeGreaterThan(0);
  });

  it("the bare splices are drawn after the splices: every splice of before stays, a headless one possibly made bare", async () => {
    for (const seed of Object.keys(WITH_SPLICES_BEFORE_BARE).map(Number)) {
      const now = fc.sample(scenarioArbitrary(), { seed, numRuns: WITH_SPLICES_BEFORE_BARE[seed]!.length });
      expect(now.map(wholeHash), `seed ${seed}: a splice of before changed (other than a headless one made bare)`).toEqual(WITH_SPLICES_BEFORE_BARE[seed]);
    }
    for (const [seed, path] of PATHS_BEFORE) {
      expect(wholeHash(await valueAtPath(scenarioArbitrary(), seed, path)), `seed ${seed}, path ${path}`).toBe(PATHS_WITH_SPLICES_BEFORE_BARE[`${seed} ${path}`]);
    }
    // The comparison reads bare splices back as headless and drops the follow-up's: these scenarios have some of each.
    const messages = drawn.flatMap((s) => s.conversations.flatMap((c) => c.messages));
    expect(messages.filter((m) => m.splice?.shape === "headless_bare").length).toBeGreaterThan(0);
    expect(messages.filter((m) => m.followUpSplice !== undefined).length).toBeGreaterThan(0);
  });

  it("the re-asks' splices are drawn after every other field: every scenario of before stays whole, a re-ask splice added", async () => {
    const now: Scenario[] = [];
    for (const seed of Object.keys(WITH_SPLICES_BEFORE_REASK).map(Number)) {
      const sample = fc.sample(scenarioArbitrary(), { seed, numRuns: WITH_SPLICES_BEFORE_REASK[seed]!.length });
      now.push(...sample);
      expect(sample.map(beforeReaskHash), `seed ${seed}: a field drawn before the re-asks' splices changed`).toEqual(WITH_SPLICES_BEFORE_REASK[seed]);
    }
    for (const [seed, path] of PATHS_BEFORE) {
      const scenario = await valueAtPath(scenarioArbitrary(), seed, path);
      now.push(scenario);
      expect(beforeReaskHash(scenario), `seed ${seed}, path ${path}`).toBe(PATHS_WITH_SPLICES_BEFORE_REASK[`${seed} ${path}`]);
    }
    // The comparison drops the re-asks' splices: these scenarios have some, each on a message that re-asks.
    const messages = now.flatMap((s) => s.conversations.flatMap((c) => c.messages));
    expect(messages.filter((m) => m.reaskSplice !== undefined).length).toBeGreaterThan(0);
    for (const m of messages) if (m.reaskSplice !== undefined) expect(m.reask).toBe(true);
  });
});

describe("deferred calls are drawn last: every earlier draw of a seed stays", () => {
  it("a deferral only adds the follow-up it makes (the hashes above take it out); it is the payment the first turn's re-runs omit", () => {
    let deferred = 0;
    const kinds = new Set<string>();
    for (const seed of [...Object.keys(BEFORE).map(Number), 1]) {
      for (const s of fc.sample(scenarioArbitrary(), { seed, numRuns: 30 })) {
        for (const m of s.conversations.flatMap((c) => c.messages)) {
          if (m.deferred === undefined) continue;
          deferred++;
          kinds.add(m.deferred.kind);
          const omitted = m.calls[m.deferred.call]!;
          expect(omitted.tool).toBe("send_payment");
          expect(m.reask).toBe(false);
          // A calm run keeps the follow-up and drops the divergence: the first turn answers the payment, and the follow-up's is a second ask.
          if (m.rerunDivergence !== undefined) expect(m.rerunDivergence).toEqual({ kind: "omit", call: expect.any(Number) });
          const identity = (c: typeof omitted) => [c.args.amount, c.args.currency, c.args.reference];
          expect(m.followUp!.map(identity)).toEqual(m.followUp!.map(() => identity(omitted)));
          expect(m.followUp![0]!.args.payee === omitted.args.payee).toBe(m.deferred.kind !== "other_payee");
          expect(withoutDeferral(m).followUp).toBeUndefined();
        }
      }
    }
    expect(deferred).toBeGreaterThan(0);
    expect([...kinds].sort()).toEqual(["other_payee", "reworded", "same", "twice"]);
  });
});

describe("a relay's repeats are drawn last: every earlier draw of a seed stays", () => {
  it("a repeat only falls on a first-turn request no splice of its own falls on (the hashes above take it out), and is drawn", () => {
    let repeats = 0;
    const again = new Set<number>();
    for (const seed of Object.keys(BEFORE).map(Number)) {
      for (const s of fc.sample(scenarioArbitrary(), { seed, numRuns: 30 })) {
        for (const m of s.conversations.flatMap((c) => c.messages)) {
          if (m.splice?.shape !== "repeat") continue;
          repeats++;
          again.add(m.splice.attempt);
          // A relay's re-send of the response's own call: nothing reordered, a call to repeat.
          expect(m.splice.reorder).toBe(false);
          expect(m.calls.length).toBeGreaterThan(0);
          expect(m.outage).toBeUndefined();
          expect(withoutRepeat(m).splice).toBeUndefined();
        }
      }
    }
    expect(repeats).toBeGreaterThan(0);
    expect([...again].sort()).toEqual([1, 2]);
  });
});

/**
 * The AI SDK profile's splices into a regenerate (`regenerateSplices`) are drawn after every other
 * field of its scenarios too: the scenarios drawn now, without them, are the ones the arbitrary of
 * before (commit 2394294) drew, its seeds' planted tests included (7, 8, 34, CI's 20261201).
 */
const AI_SDK_BEFORE_REGENERATE: Record<number, string[]> = {
  7: ["f88ce269adde7758", "02e2b74bfce281ac", "9a21a442d50472e5", "0d15082dac7f2c47", "d7c4319cc02d7b41", "5ee54eda3bb371e7"],
  8: ["a963a4e49ff80292", "6501e0c5ee00016c", "3962eddf284485a5", "8f60ea750e2417d6", "d8ce1d6766562654", "e23c1d3678ac55d6"],
  34: ["b7708c3ccb5d9206", "225d5c138b909bf7", "a9103a179765b798", "91f15d38ab532391", "ec31f8681b6b0c87", "1d11aa5d952360bd"],
  20261201: ["046d6bec4217dd4e", "7431f57500e6f511", "ffdde5973f91f669", "910263a2bfea7f86", "89bdf4d591e4a343", "cbc3b9e46bb0e998"],
};

function withoutRegenerateSplices(scenario: AiSdkScenario): AiSdkScenario {
  return { ...scenario, chats: scenario.chats.map((c) => ({ ...c, messages: c.messages.map(({ regenerateSplice: _, ...m }) => m) })) };
}

describe("ai-sdk: the regenerates' splices are drawn last", () => {
  it("every scenario of before stays whole, a regenerate's splice added", () => {
    const messages = [];
    for (const seed of Object.keys(AI_SDK_BEFORE_REGENERATE).map(Number)) {
      const now = fc.sample(aiSdkScenarioArbitrary(), { seed, numRuns: AI_SDK_BEFORE_REGENERATE[seed]!.length });
      messages.push(...now.flatMap((s) => s.chats.flatMap((c) => c.messages)));
      // The cross-turn repeats and the tabs are drawn after these (`crossTurnRepeats`, `tabs`), taken out: not in the scenarios of before.
      const hashes = now.map((s) => digest(withoutRegenerateSplices(withoutCrossTurnRepeats(withoutTabs(s)))));
      expect(hashes, `seed ${seed}: a field drawn before the regenerates' splices changed`).toEqual(AI_SDK_BEFORE_REGENERATE[seed]);
    }
    expect(messages.filter((m) => m.regenerateSplice !== undefined).length).toBeGreaterThan(0);
    for (const m of messages) if (m.regenerateSplice !== undefined) expect(m.regenerate).toBe(true);
  });
});

describe("ai-sdk: the cross-turn repeats are drawn last", () => {
  it("every scenario of before stays whole once its repeats are taken out; a repeat is an earlier message's call exactly", () => {
    let repeats = 0;
    for (const seed of Object.keys(AI_SDK_BEFORE_REGENERATE).map(Number)) {
      const now = fc.sample(aiSdkScenarioArbitrary(), { seed, numRuns: AI_SDK_BEFORE_REGENERATE[seed]!.length });
      expect(now.map((s) => digest(withoutRegenerateSplices(withoutCrossTurnRepeats(withoutTabs(s))))), `seed ${seed}`).toEqual(AI_SDK_BEFORE_REGENERATE[seed]);
    }
    for (const s of fc.sample(aiSdkScenarioArbitrary(), { seed: 20261201, numRuns: 40 })) {
      for (const chat of s.chats) {
        const r = chat.messages[1]?.repeatsEarlier;
        if (r === undefined) continue;
        repeats++;
        expect(chat.messages[1]!.calls[r.call]).toEqual(chat.messages[0]!.calls[r.of.call]);
        expect(chat.messages.some((m) => m.continuation?.kind === "approval")).toBe(false);
      }
    }
    expect(repeats).toBeGreaterThan(0);
  });
});

/**
 * The AI SDK profile's other tabs (`tabs`, AISDK-17) are drawn after every other field: the
 * scenarios drawn now, without them, are whole the ones the arbitrary of before (commit 47ee39f8)
 * drew, its seeds' planted tests included (7, 8, 34, CI's 20261201). What changes for a seed's
 * runs is only in the chats that draw tabs: their user messages carry ids (as useChat's do), and
 * the other tabs' requests run beside them.
 */
const AI_SDK_BEFORE_TABS: Record<number, string[]> = {
  7: ["33809981dce2beec", "9aa5f9ede8896daf", "bf9869e19406db63", "fc3822f5600ca816", "05c9392031921ae0", "5ee54eda3bb371e7"],
  8: ["a963a4e49ff80292", "6501e0c5ee00016c", "3962eddf284485a5", "b4a182c203e98358", "d8ce1d6766562654", "fcf76b1a55981bcf"],
  34: ["25e5fe9ddf19139e", "225d5c138b909bf7", "ac1666d03c5711a9", "91f15d38ab532391", "d029e0525e88cef1", "923dc1f894806f5c"],
  20261201: ["046d6bec4217dd4e", "3aae5670ae36f08e", "ffdde5973f91f669", "6e3377cbcf50167b", "89bdf4d591e4a343", "cbc3b9e46bb0e998"],
};

describe("ai-sdk: the other tabs are drawn last", () => {
  it("every scenario of before stays whole once its tabs are taken out; a tab's same payment is its first tab's call exactly", () => {
    let tabs = 0;
    let same = 0;
    for (const seed of Object.keys(AI_SDK_BEFORE_TABS).map(Number)) {
      const now = fc.sample(aiSdkScenarioArbitrary(), { seed, numRuns: AI_SDK_BEFORE_TABS[seed]!.length });
      expect(now.map((s) => digest(withoutTabs(s))), `seed ${seed}: a field drawn before the tabs changed`).toEqual(AI_SDK_BEFORE_TABS[seed]);
    }
    for (const s of fc.sample(aiSdkScenarioArbitrary(), { seed: 20261201, numRuns: 40 })) {
      for (const chat of s.chats) {
        if (chat.tabs === undefined) continue;
        const fork = chat.messages[chat.tabs.at]!;
        for (const tab of chat.tabs.others) {
          tabs++;
          // Texts stay unique within the chat (the mock's script and the oracle find a message by it).
          expect(new Set(messagesOf(chat).map((m) => m.text)).size).toBe(messagesOf(chat).length);
          if (tab.same === undefined) continue;
          same++;
          expect(tab.message.calls[tab.same.call]).toEqual(fork.calls[tab.same.of]);
          expect(fork.continuation?.kind).not.toBe("approval");
        }
      }
    }
    expect(tabs).toBeGreaterThan(0);
    expect(same).toBeGreaterThan(0);
  });
});
