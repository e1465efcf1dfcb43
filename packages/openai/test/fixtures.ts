import OpenAI from "openai";
import { call, respond, say, scriptFromPlans, startMockOpenAI, text, type Fault, type MockOpenAI } from "@dispatch-once/mock-openai";
import { ResponsesTurnAccumulator, type CallState } from "../src/index.js";

export const PAY_ACME = { payee: "acme", amount: 125_000, currency: "EUR", reference: "INV-1042", memo: "Invoice 1042" };
export const PAY_BOB = { payee: "bob", amount: 4_000, currency: "EUR", reference: "LOAN-3", memo: "Loan repayment" };

export function startProvider(options: { beforeCompletedMs?: number } = {}): Promise<MockOpenAI> {
  return startMockOpenAI({
    seed: "openai-tests",
    timing: { beforeCompletedMs: options.beforeCompletedMs ?? 0 },
    script: scriptFromPlans(
      {
        "pay acme": respond(call("send_payment", PAY_ACME, { reword: ["memo"] })),
        "pay acme and bob": respond(text("Two payments."), call("send_payment", PAY_ACME), call("send_payment", PAY_BOB)),
        hello: say("Hi."),
      },
      { after: "Payment sent." },
    ),
  });
}

export const sdk = (mock: MockOpenAI) => new OpenAI({ baseURL: mock.baseURL, apiKey: "test-key", maxRetries: 0 });

/** Drive one response through the real SDK into an accumulator; `onComplete` sees each call at its output_item.done. */
export async function accumulate(client: OpenAI, input: string, fault?: Fault, onComplete: (call: CallState) => void = () => {}) {
  const accumulator = new ResponsesTurnAccumulator();
  let error: unknown;
  try {
    const stream = await client.responses.create(
      { model: "gpt-test", input, stream: true },
      fault !== undefined ? { headers: { "x-mock-fault": JSON.stringify(fault) } } : undefined,
    );
    for await (const event of stream) {
      const complete = accumulator.apply(event);
      if (complete !== undefined) onComplete(complete);
    }
  } catch (e) {
    error = e;
  }
  return { accumulator, error };
}
