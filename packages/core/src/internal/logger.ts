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
 */
export function loggerOption(logger: unknown): DispatchLogger {
  if (logger === undefined) return consoleLogger;
  const warn = (logger as { warn?: unknown } | null)?.warn;
  if (typeof warn !== "function") {
    const got = typeof logger === "object" && logger !== null ? `${describeValue(logger)} whose warn is ${describeValue(warn)}` : describeValue(logger);
    throw new InvalidArgumentError("options.logger", `must be an object with a warn(message, fields) method, got ${got}`);
  }
  return logger as DispatchLogger;
}
