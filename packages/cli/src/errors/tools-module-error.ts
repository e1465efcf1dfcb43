import { EXIT_CODES } from "../exit-codes.js";
import { CliError } from "./cli-error.js";

/**
 * The `--tools` module could not be imported, or exports no tool registry (see the README,
 * "The tools module"). Exit 2: the command line pointed at the wrong thing.
 */
export class ToolsModuleError extends CliError {
  readonly modulePath: string;
  constructor(modulePath: string, message: string, options?: { cause?: unknown }) {
    super("tools_module", EXIT_CODES.usage, `${modulePath}: ${message}`, options);
    this.modulePath = modulePath;
  }
}
