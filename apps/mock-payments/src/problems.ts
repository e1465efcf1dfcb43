/**
 * RFC 9457 problem details. Every error response of the mock carries one of these stable
 * `type` URIs, plus a `code` extension member (the slug in snake_case) for callers that
 * prefer a short name.
 */
export const PROBLEM_TYPE_BASE = "https://dispatch-once.dev/problems/";
export const PROBLEM_CONTENT_TYPE = "application/problem+json";

export const PROBLEM_CATALOG = {
  unauthorized: { status: 401, title: "Missing or invalid bearer token" },
  "idempotency-key-missing": { status: 400, title: "Idempotency-Key header is required" },
  "idempotency-key-malformed": { status: 400, title: "Idempotency-Key header is malformed" },
  "invalid-request-body": { status: 400, title: "Request body is invalid" },
  "malformed-json": { status: 400, title: "Request body is not valid JSON" },
  "malformed-request": { status: 400, title: "The request is not valid HTTP" },
  "invalid-fault": { status: 400, title: "Fault specification is invalid" },
  "not-found": { status: 404, title: "No such route" },
  "payment-not-found": { status: 404, title: "Payment not found" },
  "invoice-not-found": { status: 404, title: "Invoice not found" },
  "payment-already-voided": { status: 409, title: "Payment is already voided" },
  "idempotency-key-in-use": { status: 409, title: "A request with this Idempotency-Key is still being processed" },
  "request-timeout": { status: 408, title: "The request was not received in time" },
  "payload-too-large": { status: 413, title: "Request body is too large" },
  "idempotency-key-reused": { status: 422, title: "Idempotency-Key was already used with a different request" },
  "request-header-fields-too-large": { status: 431, title: "Request header fields are too large" },
  "internal-error": { status: 500, title: "Internal server error" },
  "service-unavailable": { status: 503, title: "Service unavailable; the request was not accepted" },
} as const satisfies Record<string, { status: number; title: string }>;

export type ProblemSlug = keyof typeof PROBLEM_CATALOG;

/** The JSON body of an error response. */
export interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  /** Stable short name, e.g. "idempotency_key_reused". */
  code: string;
  [extension: string]: unknown;
}

export function problemTypeUri(slug: ProblemSlug): string {
  return PROBLEM_TYPE_BASE + slug;
}

export function makeProblem(slug: ProblemSlug, detail: string, extensions: Record<string, unknown> = {}): Problem {
  const entry = PROBLEM_CATALOG[slug];
  return {
    ...extensions,
    type: problemTypeUri(slug),
    title: entry.title,
    status: entry.status,
    detail,
    code: slug.replaceAll("-", "_"),
  };
}

/** Thrown inside request handling; the error middleware turns it into a problem+json response. */
export class ProblemError extends Error {
  readonly problem: Problem;
  constructor(slug: ProblemSlug, detail: string, extensions?: Record<string, unknown>) {
    super(detail);
    this.name = "ProblemError";
    this.problem = makeProblem(slug, detail, extensions);
  }
}
