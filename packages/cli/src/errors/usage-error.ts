import { EXIT_CODES } from "../exit-codes.js";
import { CliError } from "./cli-error.js";

/** The command line is wrong (exit 2). `command` names the command whose `--help` explains it. */
export class UsageError extends CliError {
  readonly command: string | undefined;
  constructor(message: string, command?: string) {
    super("usage", EXIT_CODES.usage, message);
    this.command = command;
  }
}
