import { expect } from "vitest";

/** A planted bug's failure is readable: the shrunk scenario's timeline, and the seed and path to replay it. */
export function expectReadable(error: unknown, seed: number): string {
  expect(error).toBeInstanceOf(Error);
  const message = (error as Error).message;
  expect(message).toContain("timeline of the shrunk scenario:");
  expect(message).toMatch(new RegExp(`seed ${seed}, path "[0-9:]+"`));
  return message;
}
