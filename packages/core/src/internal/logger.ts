import type { DispatchLogger } from "../dispatcher.js";
import { InvalidArgumentError, describeValue } from "../errors/index.js";

/** The logger an option left unset stands for: console.warn, tagged. */
const consoleLogger: DispatchLogger = {
  warn: (message, fields) => console.warn(`[dispatch-once] ${message}`, fields ?? ""),
};

/**
 * The `logger` option checked, once, where it is given (the Dispatcher's, the runner's): anything
 * with a `warn(message, fields)` method, or absent for `consoleLogger`. Anything else is refused
 * with `InvalidArgumentError` naming `options.logger`, as it would otherwise throw only when there is
 * something to warn about, in the middle of a dispatch.
 *
 * The logger returned never throws and never leaves a rejected promise behind: a warning is said
 * in the middle of a dispatch (a repeated call, DISPATCH-6) and in background handlers (a failed
 * renewal, a run settled after its bound), and a logger that fails (a full disk, a closed
 * transport, an async logger that rejects) must change neither what a dispatch does nor what it
 * tells, nor crash the process with an unhandled rejection. Its warning then goes to
 * `console.error`, with why the logger could not take it, so that it is not lost.
 */
export function loggerOption(logger: unknown): DispatchLogger {
  if (logger === undefined) return failSafe(consoleLogger);
  const warn = (logger as { warn?: unknown } | null)?.warn;
  if (typeof warn !== "function") {
    const got = typeof logger === "object" && logger !== null ? `${describeValue(logger)} whose warn is ${describeValue(warn)}` : describeValue(logger);
    throw new InvalidArgumentError("options.logger", `must be an object with a warn(message, fields) method, got ${got}`);
  }
  return failSafe(logger as DispatchLogger);
}

/** `given`, whose warn can no longer throw or leave a rejected promise behind. */
function failSafe(given: DispatchLogger): DispatchLogger {
  const fallBack = (how: "threw" | "rejected", message: string, fields: Record<string, unknown> | undefined, error: unknown) => {
    try {
      console.error(`[dispatch-once] ${message} (the logger ${how}: ${error instanceof Error ? error.message : String(error)})`, fields ?? "");
    } catch {
      // Nothing is left to say it with.
    }
  };
  return {
    warn(message, fields) {
      try {
        const returned: unknown = given.warn(message, fields);
        // An async logger's promise: its rejection is caught here, never left unhandled.
        if (returned !== null && typeof returned === "object" && typeof (returned as PromiseLike<unknown>).then === "function") {
          Promise.resolve(returned as PromiseLike<unknown>).then(undefined, (error: unknown) => fallBack("rejected", message, fields, error));
        }
      } catch (error) {
        fallBack("threw", message, fields, error);
      }
    },
  };
}
