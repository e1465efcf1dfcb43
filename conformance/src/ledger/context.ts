import { createHash } from "node:crypto";
import type { LedgerSubject } from "../types.js";

/**
 * What a deterministic check is given: the subject, and every random choice it may make derived
 * from the run's seed and the check's own name. The same seed gives the same keys, the same
 * durations and the same interleavings on every run, so a key-dependent failure reproduces with
 * `--seed` (nothing in the ledger level draws on an unseeded source).
 */
export interface LedgerCheckContext {
  subject: LedgerSubject;
  seed: number;
  /** A key in the shape the dispatcher derives (32 lowercase hex digits, KEY-1), distinct per call. */
  key(label?: string): string;
  /** A number in [0, 1) from the check's own seeded stream. */
  random(): number;
  /** An integer in [min, max] from the check's own seeded stream. */
  int(min: number, max: number): number;
}

/** A key derived from the seed, a scope (the check or property) and a label: no randomness. */
export function seededKey(seed: number, scope: string, label: string): string {
  return createHash("sha256").update(`${seed}|${scope}|${label}`).digest("hex").slice(0, 32);
}

/**
 * mulberry32 over a 32-bit state: small, fast and the same on every platform. Uniform in [0, 1).
 * Exported for harnesses that must replay their random choices from a printed seed (the fault suite).
 * @example const random = mulberry32(42); random(); // 0.6011037519201636
 */
export function mulberry32(state: number): () => number {
  let a = state >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function checkContext(subject: LedgerSubject, seed: number, scope: string): LedgerCheckContext {
  let n = 0;
  const random = mulberry32(Number.parseInt(seededKey(seed, scope, "prng").slice(0, 8), 16));
  return {
    subject,
    seed,
    key: (label = "") => seededKey(seed, scope, `${n++}|${label}`),
    random,
    int: (min, max) => min + Math.floor(random() * (max - min + 1)),
  };
}
