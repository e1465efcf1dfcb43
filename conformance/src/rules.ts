import specRules from "../../spec/rules.json";
import type { RuleRequirement } from "./types.js";

export interface RuleInfo {
  id: string;
  title: string;
  requirement: RuleRequirement;
}

/**
 * The rule ids the kit reports against (spec §6 and §10; other sections join with the
 * end-to-end level). Ids are authoritative and never renumbered; titles are short forms.
 */
export const RULES: readonly RuleInfo[] = [
  { id: "LEDGER-1", requirement: "MUST", title: "claim is atomic: of concurrent claims of one key exactly one wins" },
  { id: "LEDGER-2", requirement: "MUST", title: "claim before run: a claim is reported only when its row is stored" },
  { id: "LEDGER-3", requirement: "MUST", title: "states and transitions in_flight/completed/failed/unknown/released" },
  { id: "LEDGER-4", requirement: "MUST", title: "the fencing token strictly increases with every successful claim" },
  { id: "LEDGER-5", requirement: "MUST", title: "a fence that does not own the in_flight row is refused (stale_claim) and changes nothing" },
  { id: "LEDGER-6", requirement: "MUST", title: "a live in-flight row is seen by other claimants, who do not run" },
  { id: "LEDGER-7", requirement: "MUST", title: "expired keyed_write is taken over; expired unkeyed_write becomes unknown, never re-run" },
  { id: "LEDGER-8", requirement: "MUST", title: "failure dispositions: failed replays identically, release gives the claim back" },
  { id: "LEDGER-9", requirement: "MUST", title: "the owner keeps its claim by renewing the lease" },
  { id: "LEDGER-10", requirement: "MUST", title: "results are stored as JSON text and replayed byte-for-byte; over the limit fails closed" },
  { id: "LEDGER-11", requirement: "MUST", title: "an unreadable row raises ledger_corrupt and is never treated as absent" },
  { id: "LEDGER-12", requirement: "MUST", title: "an unreachable store raises ledger_unavailable; no claim is reported that did not happen" },
  { id: "LEDGER-13", requirement: "MUST", title: "finished rows are kept for the retention period; in-flight rows are never swept" },
  { id: "LEDGER-14", requirement: "MUST", title: "the adapter declares its durability (and it is consistent)" },
  { id: "LEDGER-15", requirement: "MUST", title: "a live in-flight row is returned on re-claim so the caller waits (dispatcher waits)" },
  { id: "LEDGER-16", requirement: "MUST", title: "ownership is the fence, not the owner string; an expired lease nobody acted on is still the owner's" },
  { id: "LEDGER-17", requirement: "MUST", title: "lookup never acts on an expired lease" },
  { id: "LEDGER-18", requirement: "MUST", title: "expiry follows the effect class stored in the row, not the claimant's" },
  { id: "LEDGER-19", requirement: "MUST", title: "after retention a key is absent: the next claim starts afresh" },
  { id: "LEDGER-20", requirement: "MUST", title: "a ledger shared across processes measures leases on the store's clock" },
  { id: "LEDGER-21", requirement: "MUST", title: "the creating claim stores the request; re-claims, takeovers and unknown keep it; claimed results and lookup return it byte for byte" },
  { id: "LEDGER-25", requirement: "MUST", title: "listExpiredInFlight (optional): exactly the in-flight rows whose lease expired at least olderThanMs ago, oldest expiry first, at most limit; changes no row" },
  { id: "LEDGER-26", requirement: "MUST", title: "a claim is recognised by its claim id: sent again, it is the same claim (its fence), not another attempt's row" },
  { id: "LEDGER-27", requirement: "MUST", title: "a released row refuses the claim id it was released under (stale_claim) until retention" },
  { id: "LEDGER-28", requirement: "MUST", title: "retire (optional): a retired claim id is refused for the retention, row or not, before recognition; release only its own in-flight row" },
  { id: "LEDGER-29", requirement: "MUST", title: "leaseMs from 0 to 366 days is accepted, a fraction rounded up; anything else is refused with invalid_ledger_input before the store is touched" },
  { id: "CONF-1", requirement: "MUST", title: "a ledger adapter passes the kit's checks of every MUST rule of §6 but LEDGER-22 to LEDGER-24, with its declared capabilities" },
  { id: "CONF-2", requirement: "MUST", title: "an implementation passes the key vectors and the end-to-end runs" },
];

/** spec/rules.json, bundled at build time: `{ id, section, level, subject, summary }` per rule. */
interface SpecRule {
  id: string;
  section?: string;
  level?: string;
  subject?: string;
  summary?: string;
}

const SPEC_RULES: SpecRule[] = Array.isArray(specRules) ? (specRules as SpecRule[]) : [];

/** The spec's catalogue wins (its levels and summaries are normative); the list above fills gaps. */
const BY_ID = new Map<string, RuleInfo>(RULES.map((r) => [r.id, r]));
for (const r of SPEC_RULES) {
  if (typeof r.id !== "string") continue;
  const level = r.level === "MUST" || r.level === "SHOULD" || r.level === "MAY" ? r.level : BY_ID.get(r.id)?.requirement ?? "MUST";
  BY_ID.set(r.id, { id: r.id, requirement: level, title: r.summary ?? BY_ID.get(r.id)?.title ?? "" });
}

/** The catalogue entry of a rule id; an id the kit does not know is treated as MUST (fail closed). */
export function ruleInfo(id: string): RuleInfo {
  return BY_ID.get(id) ?? { id, title: "", requirement: "MUST" };
}

/** Sorts rule ids by section prefix then number (LEDGER-2 before LEDGER-10), catalogue prefixes first. */
export function compareRuleIds(a: string, b: string): number {
  const pa = splitId(a);
  const pb = splitId(b);
  if (pa.prefix !== pb.prefix) {
    const order = prefixOrder(pa.prefix) - prefixOrder(pb.prefix);
    return order !== 0 ? order : pa.prefix.localeCompare(pb.prefix);
  }
  return pa.n - pb.n;
}

const PREFIXES = ["KEY", "TURN", "EFFECT", "IDENT", "LEDGER", "DISPATCH", "STREAM", "RECORD", "CONF", "ERR"];

function prefixOrder(prefix: string): number {
  const i = PREFIXES.indexOf(prefix);
  return i === -1 ? PREFIXES.length : i;
}

function splitId(id: string): { prefix: string; n: number } {
  const m = /^([A-Z]+)-(\d+)$/.exec(id);
  return m ? { prefix: m[1]!, n: Number(m[2]) } : { prefix: id, n: 0 };
}
