/**
 * The "one response" judge, shared by the end-to-end level (conformance-e2e's oracle) and the
 * chaos suite (faults/): a committed turn's calls are, in order and with their arguments, the
 * calls of one response the model gave (STREAM-8, STREAM-10, STREAM-17). A turn that mixes two
 * responses (a proxy's splice of the response to the request it sent again, taken in) commits
 * calls that no response made together, even when each of them was asked for by one. No imports:
 * the ledger level's entry re-exports it and stays core and fast-check only.
 */

/** A call as a response made it or a committed turn holds it: its tool's name and its arguments. */
export interface ResponseCall {
  name: string;
  input: unknown;
}

/** Arguments compared as values, whatever the member order the response streamed them in. */
export function canonicalArgs(v: unknown): string {
  if (v === null || typeof v !== "object") return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(canonicalArgs).join(",")}]`;
  const o = v as Record<string, unknown>;
  return `{${Object.keys(o)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${canonicalArgs(o[k])}`)
    .join(",")}}`;
}

/** A response's calls as the judge prints them: `name {args}; name {args}`. */
export function callSequence(calls: readonly ResponseCall[]): string {
  return calls.map((c) => `${c.name} ${canonicalArgs(c.input)}`).join("; ");
}

/**
 * Undefined when the committed calls are those of one of `responses` (each the calls of one
 * response the model gave to the same words), in order and with their arguments, or when there
 * are none; else the committed sequence and each response's, for the caller's violation.
 */
export function mixedResponses(committed: readonly ResponseCall[], responses: readonly (readonly ResponseCall[])[]): { committed: string; responses: string[] } | undefined {
  if (committed.length === 0) return undefined;
  const sequence = callSequence(committed);
  const asked = responses.map(callSequence);
  return asked.includes(sequence) ? undefined : { committed: sequence, responses: asked };
}
