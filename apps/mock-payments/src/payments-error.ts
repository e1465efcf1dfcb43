/**
 * What a failed call means for the effect, from the caller's side:
 * - "rejected": the server refused the request; the effect did not happen and repeating the same
 *   request fails the same way (400, 401, 404, 413, a validation 422, 409 payment-already-voided).
 *   Maps to the core FailureDisposition "definite".
 * - "request_mismatch": 422 idempotency-key-reused: the key is held for a DIFFERENT request, which
 *   may well have been performed. It is never "did not happen": maps to "request_mismatch"
 *   (the dispatcher marks the call unknown; spec EFFECT-6).
 * - "not_performed": the effect certainly did not happen and a retry may succeed (503 before
 *   acceptance, connection refused). Maps to "not_performed".
 * - "in_flight": another request with the same Idempotency-Key is executing (409); its outcome
 *   is not known yet. Retry later with the same key.
 * - "unknown": the request may or may not have been performed (connection dropped mid-request,
 *   timeout, 5xx other than the mock's 503). Retry with the same key to learn the outcome.
 */
export type PaymentsOutcome = "rejected" | "not_performed" | "in_flight" | "unknown" | "request_mismatch";

export abstract class PaymentsError extends Error {
  abstract readonly code: string;
  abstract readonly outcome: PaymentsOutcome;
  /** True when the effect of this request certainly did not happen. */
  get effectNotPerformed(): boolean {
    return this.outcome === "rejected" || this.outcome === "not_performed";
  }
}
