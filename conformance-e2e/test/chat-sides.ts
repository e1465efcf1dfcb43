import { RUNNER_PROVIDERS } from "../src/index.js";

/**
 * The runner sides of a planted suite whose rule the Chat Completions side decides with code of its
 * own: the records a failed or taken-over attempt leaves (which calls an attempt dispatched, and when,
 * is its accumulator's: a call final at the next index's first fragment or at `finish_reason`,
 * STREAM-20; its call ids are new on every attempt) and what a resumed turn tells of a dead worker's
 * effect. RUNNER_PROVIDERS stays the other two for every other planted suite (CI's budget): each of
 * those was run on "openai-chat" too and rejected its planted bug there (README, "Planted bugs on the
 * Chat Completions side").
 */
export const WITH_CHAT = [...RUNNER_PROVIDERS, "openai-chat"] as const;
