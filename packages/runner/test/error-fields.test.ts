import { ERROR_CATALOGUE } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { InvalidArgumentsJsonError, StreamIncompleteError } from "../src/index.js";

/** The fields an error adds to DispatchOnceError's own (code, name; message and cause are not own enumerable data). */
function carried(error: object): string[] {
  return Object.keys(error).filter((field) => field !== "code" && field !== "name");
}

describe("the runner's errors carry only the fields the error catalogue lists (ERR-4, §11)", () => {
  // The catalogue's `carries` (and §11's table made from it) is how an adopter learns what to read
  // off an error: a field the class sets and the catalogue does not name is one nobody is told of.
  it.each([
    ["stream_incomplete: every argument given, a provider's final stop (STREAM-13) included", new StreamIncompleteError(12, "message_stop", "overloaded_error: busy", "refusal")],
    ["stream_incomplete: a stream that went idle past the runner's bound (STREAM-16)", new StreamIncompleteError(3, "message_stop", undefined, undefined, 300_000)],
    ["invalid_arguments_json", new InvalidArgumentsJsonError("pay", "Unexpected end of JSON input")],
  ])("%s", (_name, error) => {
    const entry = ERROR_CATALOGUE.find((e) => e.code === error.code)!;
    expect(carried(error).filter((field) => !entry.carries.includes(field))).toEqual([]);
  });
});
