import { catalogueEntry, effectOf, retryableOf } from "@dispatch-once/core";

/** What to tell a client whose message could not be answered, read from the error catalogue. */
export function describeFailure(error: unknown) {
  const entry = catalogueEntry(error); // undefined for anything that is not a Dispatch-Once error
  return {
    code: entry?.code ?? "internal_error",
    // "same_message": re-send the SAME message id (or dispatch the same call again) later; the
    // ledger answers whatever already ran, so a re-send never repeats an effect. retryableOf reads
    // the error, not only its code: a turn_failed whose record says it is not retryable, or a
    // stale_claim whose effect happened, is "no". An error nobody classified is treated as
    // re-sendable: re-sending the same id is always safe.
    resend: entry === undefined || retryableOf(error) === "same_message",
    // "no" | "yes" | "possibly": whether the effect behind the error may have happened.
    effect: effectOf(error),
  };
}
