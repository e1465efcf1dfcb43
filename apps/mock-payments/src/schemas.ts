import { z } from "zod";
import { isIso4217Currency } from "./currencies.js";

/** An ISO 4217 alphabetic code from the list the mock knows (currencies.ts), not just the shape. */
const currencySchema = z
  .string()
  .regex(/^[A-Z]{3}$/, "must be an ISO 4217 code: three upper-case letters")
  .refine(isIso4217Currency, "is not an ISO 4217 currency code");

/** Request bodies. Strict: an unknown member is a 400, so "same payload" is never ambiguous. */
export const createPaymentBodySchema = z.strictObject({
  payee: z.string().min(1).max(200),
  /** Minor units (cents); an integer above zero. */
  amount: z.int().positive(),
  /** ISO 4217 alphabetic code. */
  currency: currencySchema,
  /** The invoice or reference this payment settles. */
  reference: z.string().min(1).max(200),
  memo: z.string().max(1000).optional(),
});
export type CreatePaymentBody = z.infer<typeof createPaymentBodySchema>;

export const voidPaymentBodySchema = z.strictObject({
  reason: z.string().max(500).optional(),
});
export type VoidPaymentBody = z.infer<typeof voidPaymentBodySchema>;

export const createInvoiceBodySchema = z.strictObject({
  customer: z.string().min(1).max(200),
  amount: z.int().positive(),
  currency: currencySchema,
  memo: z.string().max(1000).optional(),
});
export type CreateInvoiceBody = z.infer<typeof createInvoiceBodySchema>;

/** Resources as the API returns them. */
export interface Payment {
  id: string;
  object: "payment";
  payee: string;
  amount: number;
  currency: string;
  reference: string;
  memo: string | null;
  status: "succeeded" | "voided";
  created_at: string;
  voided_at: string | null;
  void_reason: string | null;
}

export interface Invoice {
  id: string;
  object: "invoice";
  customer: string;
  amount: number;
  currency: string;
  memo: string | null;
  created_at: string;
}

export interface ListResponse<T> {
  object: "list";
  data: T[];
}

/**
 * What the server holds under an idempotency key, for the account asking (GET
 * /v1/idempotency-keys/:key): `completed` with the stored response (the effect happened, or a
 * business error was stored), `in_flight` (claimed, not finished: a request is being processed),
 * or `absent` (no request with this key has been accepted, or its record has expired). `absent`
 * says nothing about a request still on its way to the server.
 */
export type IdempotencyKeyLookup =
  | { object: "idempotency_key"; key: string; state: "absent" }
  | { object: "idempotency_key"; key: string; state: "in_flight"; operation: Operation }
  | { object: "idempotency_key"; key: string; state: "completed"; operation: Operation; response: { status: number; body: unknown } };

/** The API's operations; faults are matched against these names. */
export const OPERATIONS = [
  "create_payment",
  "void_payment",
  "get_payment",
  "list_payments",
  "get_invoice",
  "create_invoice",
  "list_invoices",
  "lookup_idempotency_key",
] as const;
export type Operation = (typeof OPERATIONS)[number];
/** Faults without an explicit `operations` list apply to these (the calls that perform effects). */
export const WRITE_OPERATIONS: readonly Operation[] = ["create_payment", "void_payment", "create_invoice"];

export const FAULT_OUTCOMES = ["fail_before_accept", "drop_after_accept", "crash_after_accept"] as const;
export type FaultOutcome = (typeof FAULT_OUTCOMES)[number];

const latencySchema = z.int().min(0).max(600_000);
const operationsSchema = z.array(z.enum(OPERATIONS)).min(1);

/** What one request suffers: an added latency and/or an outcome. */
export const faultSpecSchema = z.strictObject({
  latencyMs: latencySchema.optional(),
  outcome: z.enum(FAULT_OUTCOMES).optional(),
});
export type FaultSpec = z.infer<typeof faultSpecSchema>;

/** A fault set in-process or via /_control: optionally restricted to operations and an account. */
export const injectedFaultSchema = faultSpecSchema.extend({
  operations: operationsSchema.optional(),
  account: z.string().min(1).optional(),
});
export type InjectedFault = z.infer<typeof injectedFaultSchema>;

/**
 * A seeded random fault plan. Every request whose operation matches draws exactly two numbers
 * from the PRNG (outcome, latency), in arrival order, so a seed and a request sequence fix the faults.
 */
export const faultPlanSchema = z
  .strictObject({
    seed: z.int().min(0).max(0xffffffff),
    probabilities: z
      .strictObject({
        fail_before_accept: z.number().min(0).max(1).optional(),
        drop_after_accept: z.number().min(0).max(1).optional(),
        crash_after_accept: z.number().min(0).max(1).optional(),
      })
      .optional(),
    latencyMs: z
      .union([latencySchema, z.strictObject({ min: latencySchema, max: latencySchema })])
      .optional(),
    operations: operationsSchema.optional(),
  })
  .refine(
    (p) =>
      (p.probabilities?.fail_before_accept ?? 0) +
        (p.probabilities?.drop_after_accept ?? 0) +
        (p.probabilities?.crash_after_accept ?? 0) <=
      1,
    { message: "outcome probabilities must sum to at most 1" },
  )
  .refine((p) => typeof p.latencyMs !== "object" || p.latencyMs.min <= p.latencyMs.max, {
    message: "latencyMs.min must not exceed latencyMs.max",
  });
export type FaultPlan = z.infer<typeof faultPlanSchema>;

/** Body of POST /_control/faults. */
export const faultControlSchema = z.discriminatedUnion("mode", [
  z.strictObject({ mode: z.literal("queue"), fault: injectedFaultSchema, times: z.int().min(1).optional() }),
  z.strictObject({ mode: z.literal("global"), fault: injectedFaultSchema.nullable() }),
  z.strictObject({ mode: z.literal("plan"), plan: faultPlanSchema.nullable() }),
]);

export interface ZodIssueSummary {
  path: string;
  message: string;
}

export function summarizeIssues(error: z.ZodError): ZodIssueSummary[] {
  return error.issues.map((i) => ({
    path: i.path.map(String).join(".") || "(root)",
    message: i.message,
  }));
}
