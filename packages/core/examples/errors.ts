import { catalogueEntry, effectOf } from "@dispatch-once/core";

/** What to tell a client whose message could not be answered, read from the error catalogue. */
export function describeFailure(error: unknown) {
  const entry = catalogueEntry(error); // undefined for anything that is not a Dispatch-Once error
  return {
    code: entry?.code ?? "internal_error",
    // "same_message": re-send the SAME message id (or dispatch the same call again) later; the
    // ledger answers whatever already ran, so a re-send never repeats an effect. An error nobody
    // classified is treated the same way: re-sending the same id is always safe.
    resend: entry === undefined || entry.retryable === "same_message",
    // "no" | "yes" | "possibly": whether the effect behind the error may have happened.
    effect: effectOf(error),
  };
}
