import { describe, expect, it } from "vitest";
import { conversationStoreChecks, ledgerChecks, memoryConversationSubject, memoryLedgerSubject, runChecks, type Check } from "../src/index.js";
import { BLIND_LEDGER_BUGS, type BlindLedgerBug } from "./fixtures/blind-j/blind-ledger.js";
import { BLIND_STORE_BUGS, type BlindStoreBug } from "./fixtures/blind-j/blind-conversation-store.js";
import { blindLedgerSubject, blindStoreSubject } from "./fixtures/blind-j/subjects.js";

/**
 * Blind round J (2026-12-05): 24 broken ledgers and 17 broken conversation stores written from the
 * spec and the adapters' source before the kit was read (fixtures/blind-j: each a copy of the
 * reference with one mutation, the real-world cause beside it). The whole kit (100 runs, seed
 * 20261205) certified four (`before: "escaped"`), caught one only when the store's clock did not
 * tick mid-check, and caught four others only by a check of another rule (or one that needs an
 * optional hook); each of these nine is now rejected by the check of its own rule named here, added
 * or sharpened for it. Each subject runs only that one check.
 */
interface Blind<Bug> {
  bug: Bug;
  rule: string;
  check: RegExp;
  message: RegExp;
  /** How the kit stood before this round where it did not reject the subject by this check: "escaped" (the whole kit certified it), or what caught it instead. */
  before?: string;
}

const LEDGERS: Blind<BlindLedgerBug>[] = [
  { bug: "release-no-fence", rule: "LEDGER-5", check: /^after a takeover the stale owner's complete/, message: /release by the stale owner/ },
  { bug: "retention-from-claim", rule: "LEDGER-13", check: /kept for its whole retention, counted from when it finished/, message: /lookup of the completed row/ },
  { bug: "sweep-in-flight", rule: "LEDGER-13", check: /^sweep never removes an in-flight row older than the retention/, message: /./ },
  { bug: "reclaim-same-fence", rule: "LEDGER-4", check: /increases by one across 5 release and re-claim cycles/, message: /expected 2 \(the previous fence \+ 1\)/ },
  { bug: "expiry-claimant-class", rule: "LEDGER-18", check: /^expiry follows the effect class stored in the row/, message: /expected outcome "existing", got "claimed"/ },
  { bug: "claim-id-casefold", rule: "LEDGER-26", check: /^claim ids are compared exactly/, message: /ASCII case/ },
  { bug: "claim-id-any-state", rule: "LEDGER-26", check: /^a claim id recognises only its own in-flight claim/, message: /after complete/ },
  { bug: "release-drops-claim-id", rule: "LEDGER-27", check: /^vector LT-058:/, message: /expected 'stale_claim'/ },
  { bug: "retire-needs-row", rule: "LEDGER-28", check: /^a claim id retired for a key without a row/, message: /no row/ },
  { bug: "result-reencoded", rule: "LEDGER-10", check: /^results are replayed byte-for-byte \(14 tricky/, message: /not byte-for-byte/ },
  { bug: "result-size-utf16", rule: "LEDGER-10", check: /^the size limit counts 3-byte UTF-8 characters/, message: /over a 4096-byte limit/ },
  { bug: "takeover-request-reencoded", rule: "LEDGER-21", check: /^requests are stored and returned byte for byte/, message: /takeover/ },
  { bug: "key-trailing-space", rule: "LEDGER-30", check: /^keys are compared exactly/, message: /trailing space/ },
  { bug: "list-cursor-since-only", rule: "LIST-5", check: /^paging with the cursor/, message: /never listed/ },
  { bug: "list-older-than-claimed", rule: "LIST-1", check: /^olderThanMs counts a finished row from when it finished/, message: /claimed .* ms before it finished/, before: "escaped" },
  { bug: "resolve-release-keeps-fence", rule: "RESOLVE-5", check: /^resolving an expired claim bumps the fence/, message: /not_performed/, before: "other checks (RESOLVE-4, RESOLVE-7)" },
  { bug: "no-audit-lease-expired", rule: "RESOLVE-7", check: /^the transitions into unknown are audited/, message: /expired unkeyed_write claim/ },
  { bug: "takeover-origin-claimant", rule: "LIST-3", check: /^the creating claim stores conversationId and turnIndex/, message: /takeover/, before: "escaped" },
  { bug: "lookup-expires", rule: "LEDGER-17", check: /^lookup never acts on an expired lease/, message: /expired unkeyed_write claim/ },
  { bug: "expired-list-strict", rule: "LEDGER-25", check: /lists a lease from the instant it ends/, message: /did not list it/ },
  { bug: "lease-round-nearest", rule: "LEDGER-29", check: /round a fraction up/, message: /rounded up to 60,001 ms/ },
  { bug: "claim-read-then-write", rule: "LEDGER-1", check: /^exactly one of 64 concurrent claims of one key wins$/, message: /exactly one must/ },
  { bug: "resolve-read-then-write", rule: "RESOLVE-8", check: /^of concurrent resolutions of one row exactly one wins/, message: /exactly one must/ },
  { bug: "renew-from-old-expiry", rule: "LEDGER-16", check: /^an owner that renews its expired lease/, message: /now \+ leaseMs/, before: "escaped" },
];

const STORES: Blind<BlindStoreBug>[] = [
  { bug: "dedupe-recent-ids", rule: "TURN-2", check: /however many messages came after it/, message: /a re-send of m001 after 300 messages/ },
  { bug: "commit-fence-null-lease", rule: "TURN-5", check: /^a commit under a stale fence is refused/, message: /released/, before: "escaped" },
  { bug: "commit-no-version", rule: "TURN-5", check: /^a commit at a turn index other than the committed count/, message: /commit at index 1 with none committed/ },
  { bug: "fence-resets-on-release", rule: "TURN-10", check: /^every grant's fence is higher than all earlier ones/, message: /is not higher than every earlier one/ },
  { bug: "begun-upserted", rule: "TURN-15", check: /^resumed is true exactly when/, message: /begins turn 1 again/ },
  { bug: "boundat-every-binding", rule: "TURN-11", check: /^a bound message shows boundAt/, message: /after a reopen/, before: "another check (TURN-12); TURN-11's only when the clock ticked mid-check" },
  { bug: "first-failed-upserted", rule: "TURN-17", check: /^with reopenWithinMs, a listed failed turn says reopenable/, message: /firstFailedAt/ },
  { bug: "records-by-id", rule: "RECORD-4", check: /102 records come back all/, message: /in the order they were added/ },
  { bug: "json-strip-nulls", rule: "TURN-7", check: /come back deep-equal/, message: /content/ },
  { bug: "message-id-pad-space", rule: "TURN-19", check: /^ids are compared exactly/, message: /trailing space/ },
  { bug: "record-before-cas", rule: "TURN-5", check: /^a commit's record \(recordsWithCommit\)/, message: /refused or not made/ },
  { bug: "single-grant-column", rule: "TURN-10", check: /^a copy of an earlier grant's acquire/, message: /late copy/ },
  { bug: "reopen-window-strict", rule: "TURN-12", check: /^a re-send with reopenWithinMs reopens a failed message only while/, message: /reopenWithinMs 0/, before: "by chance (only when the clock did not tick mid-check)" },
  { bug: "failed-list-by-first", rule: "TURN-17", check: /^listFailedTurns\(\{ olderThanMs \}\) counts on the store's clock/, message: /again/, before: "only the legacyFailedRows check (TURN-17)" },
  { bug: "bound-always-true", rule: "TURN-11", check: /^a bound message shows boundAt/, message: /taken over/, before: "another check (TURN-12)" },
  { bug: "grant-resend-no-restart", rule: "TURN-10", check: /^an acquire sent again with the grant id of the live grant/, message: /restart/ },
  { bug: "reopen-ignores-later-binding", rule: "TURN-12", check: /after another message was bound returns the stored failure/, message: /re-send of m1 after m2 was bound/ },
];

const SEED = 20261205;
const RUNS = 30;

function only<Bug>(checks: Check[], blind: Blind<Bug>): Check[] {
  const picked = checks.filter((c) => c.rule === blind.rule && blind.check.test(c.name));
  expect(picked.map((c) => c.name), `exactly one ${blind.rule} check matching ${blind.check}`).toHaveLength(1);
  return picked;
}

describe("blind round J: every blind broken ledger is rejected by the check of the rule it breaks", () => {
  it("lists 24 ledgers, each once and each with the rule its fixture names; 3 escaped the kit before this round", () => {
    expect(LEDGERS.map((b) => b.bug).sort()).toEqual(Object.keys(BLIND_LEDGER_BUGS).sort());
    for (const b of LEDGERS) expect(b.rule === BLIND_LEDGER_BUGS[b.bug] || (b.bug === "renew-from-old-expiry" && BLIND_LEDGER_BUGS[b.bug] === "LEDGER-6"), b.bug).toBe(true);
    expect(LEDGERS.filter((b) => b.before === "escaped")).toHaveLength(3);
    expect(LEDGERS.filter((b) => b.before !== undefined)).toHaveLength(4);
  });

  for (const blind of LEDGERS) {
    it(`${blind.bug} fails ${blind.rule}${blind.before === undefined ? "" : ` (before this round: ${blind.before})`}`, async () => {
      const subject = blindLedgerSubject(blind.bug);
      const report = await runChecks(only(ledgerChecks(subject, { runs: RUNS, seed: SEED }), blind), { subject: subject.name, seed: SEED, runs: RUNS });
      const [check] = report.checks;
      expect(check!.status, `${check!.rule} ${check!.name}: ${String(check!.error)}`).toBe("fail");
      expect(check!.error).toMatch(blind.message);
    });
  }

  for (const subject of [blindLedgerSubject(), memoryLedgerSubject()]) {
    it(`the checks this round names pass ${subject.name} without a bug`, async () => {
      const checks = ledgerChecks(subject, { runs: RUNS, seed: SEED }).filter((c) => LEDGERS.some((b) => c.rule === b.rule && b.check.test(c.name)));
      expect(checks).toHaveLength(new Set(LEDGERS.map((b) => `${b.rule} ${b.check.source}`)).size);
      const report = await runChecks(checks, { subject: subject.name, seed: SEED, runs: RUNS });
      expect(report.checks.filter((c) => c.status !== "pass")).toEqual([]);
    });
  }
});

describe("blind round J: every blind broken conversation store is rejected by the check of the rule it breaks", () => {
  it("lists 17 stores, each once and each with the rule its fixture names; 1 escaped the kit before this round", () => {
    expect(STORES.map((b) => b.bug).sort()).toEqual(Object.keys(BLIND_STORE_BUGS).sort());
    for (const b of STORES) expect(b.rule === BLIND_STORE_BUGS[b.bug] || (b.bug === "json-strip-nulls" && BLIND_STORE_BUGS[b.bug] === "TURN-18") || (b.bug === "first-failed-upserted" && BLIND_STORE_BUGS[b.bug] === "TURN-12"), b.bug).toBe(true);
    expect(STORES.filter((b) => b.before === "escaped")).toHaveLength(1);
    expect(STORES.filter((b) => b.before !== undefined)).toHaveLength(5);
  });

  for (const blind of STORES) {
    it(`${blind.bug} fails ${blind.rule}${blind.before === undefined ? "" : ` (before this round: ${blind.before})`}`, async () => {
      const subject = blindStoreSubject(blind.bug);
      const report = await runChecks(only(conversationStoreChecks(subject, { runs: RUNS, seed: SEED }), blind), { subject: subject.name, seed: SEED, runs: RUNS, levels: ["conversation"] });
      const [check] = report.checks;
      expect(check!.status, `${check!.rule} ${check!.name}: ${String(check!.error)}`).toBe("fail");
      expect(check!.error).toMatch(blind.message);
    });
  }

  for (const subject of [blindStoreSubject(), memoryConversationSubject()]) {
    it(`the checks this round names pass ${subject.name} without a bug`, async () => {
      const checks = conversationStoreChecks(subject, { runs: RUNS, seed: SEED }).filter((c) => STORES.some((b) => c.rule === b.rule && b.check.test(c.name)));
      expect(checks).toHaveLength(new Set(STORES.map((b) => `${b.rule} ${b.check.source}`)).size);
      const report = await runChecks(checks, { subject: subject.name, seed: SEED, runs: RUNS, levels: ["conversation"] });
      expect(report.checks.filter((c) => c.status !== "pass")).toEqual([]);
    });
  }
});
