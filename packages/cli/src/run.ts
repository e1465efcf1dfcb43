import { parseArgs } from "node:util";
import { isDispatchOnceError } from "@dispatch-once/core";
import { auditCommand } from "./commands/audit.js";
import { inspectCommand } from "./commands/inspect.js";
import { listCommand } from "./commands/list.js";
import { reconcileCommand } from "./commands/reconcile.js";
import { resolveCommand } from "./commands/resolve.js";
import { sweepCommand } from "./commands/sweep.js";
import { turnsCommand } from "./commands/turns.js";
import { ledgerOpener, type CliIo, type Command, type OptionSpecs, type OptionValues } from "./context.js";
import { CliError } from "./errors/cli-error.js";
import { UsageError } from "./errors/usage-error.js";
import { EXIT_CODES } from "./exit-codes.js";

export const COMMANDS: readonly Command[] = [listCommand, inspectCommand, resolveCommand, reconcileCommand, auditCommand, sweepCommand, turnsCommand];

const EXIT_HELP = `Exit codes:
  0  ok
  1  error: the store failed or answered something unexpected
  2  usage: wrong command line, unsupported target, unusable tools module
  3  not found: the key has no row
  4  refused: the ledger refused (row not open, fence moved), an unsupported operation,
     or a reconcile that settled nothing
  5  audit --strict flagged a tool
  6  the adapter package for the target (or its driver) is not installed`;

export function mainHelp(): string {
  const width = Math.max(...COMMANDS.map((c) => c.name.length));
  return `Usage: dispatch-once <command> [options]

Operate a Dispatch-Once ledger: find the calls whose outcome is open, check them, settle them.

Commands:
${COMMANDS.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`).join("\n")}

Run dispatch-once <command> --help for a command's options.

${EXIT_HELP}
`;
}

/**
 * Run one command line (without `node` and the script) and return its exit status. Never throws,
 * never calls process.exit: the bin sets process.exitCode from the result, tests call it directly.
 */
export async function runCli(argv: readonly string[], io: Partial<CliIo> = {}): Promise<number> {
  const full: CliIo = {
    stdout: io.stdout ?? ((text) => void process.stdout.write(text)),
    stderr: io.stderr ?? ((text) => void process.stderr.write(text)),
    env: io.env ?? process.env,
    cwd: io.cwd ?? process.cwd(),
  };
  const [name, ...rest] = argv;
  if (name === undefined || name === "--help" || name === "-h" || name === "help") {
    const topic = name === "help" ? COMMANDS.find((c) => c.name === rest[0]) : undefined;
    (name === undefined ? full.stderr : full.stdout)(topic !== undefined ? `${topic.help}\n` : mainHelp());
    return name === undefined ? EXIT_CODES.usage : EXIT_CODES.ok;
  }
  const command = COMMANDS.find((c) => c.name === name);
  if (command === undefined) {
    full.stderr(`dispatch-once: unknown command ${JSON.stringify(name)}\n\n${mainHelp()}`);
    return EXIT_CODES.usage;
  }
  let opener: ReturnType<typeof ledgerOpener> | undefined;
  try {
    const { values, positionals } = parse(command, rest);
    if (values["help"] === true) {
      full.stdout(`${command.help}\n`);
      return EXIT_CODES.ok;
    }
    const [min, max] = command.positionals;
    if (positionals.length < min || positionals.length > max) {
      throw new UsageError(
        positionals.length < min ? `missing argument (see the usage line)` : `unexpected argument ${JSON.stringify(positionals[max])}`,
        command.name,
      );
    }
    opener = ledgerOpener(full, values, command);
    return await command.run({ io: full, values, positionals, command: command.name, ledger: opener.open });
  } catch (error) {
    return report(error, full, command);
  } finally {
    await opener?.close().catch((error: unknown) => full.stderr(`warning: closing the ledger failed: ${String(error)}\n`));
  }
}

function parse(command: Command, args: readonly string[]): { values: OptionValues; positionals: string[] } {
  try {
    const options = { ...command.options, help: { type: "boolean", short: "h" } } as const;
    const parsed = parseArgs({ args: [...args], options, allowPositionals: true, strict: true, tokens: true });
    // parseArgs keeps the last of a repeated option: `--completed A ... --completed B` would store
    // B, `-l prod.db ... -l other.db` open the other file, without a word. A value given twice is refused.
    const seen = new Set<string>();
    for (const token of parsed.tokens) {
      if (token.kind !== "option") continue;
      const spec = (options as OptionSpecs)[token.name];
      if (spec?.type !== "string" || spec.multiple === true) continue;
      if (seen.has(token.name)) throw new UsageError(`--${token.name} is given more than once: give it once`, command.name);
      seen.add(token.name);
    }
    return { values: parsed.values as OptionValues, positionals: parsed.positionals };
  } catch (error) {
    // parseArgs' own TypeErrors (ERR_PARSE_ARGS_*): an unknown option, a missing value.
    const code = (error as { code?: unknown }).code;
    if (typeof code === "string" && code.startsWith("ERR_PARSE_ARGS")) throw new UsageError((error as Error).message, command.name);
    throw error;
  }
}

/** Print an error as one line (plus a usage hint) and map it to its exit status. */
function report(error: unknown, io: CliIo, command: Command): number {
  if (CliError.isInstance(error)) {
    io.stderr(`dispatch-once ${command.name}: ${error.message}\n`);
    if (error.code === "usage") io.stderr(`Run dispatch-once ${command.name} --help for usage.\n`);
    return error.exitCode;
  }
  if (isDispatchOnceError(error)) {
    io.stderr(`dispatch-once ${command.name}: ${error.message} [${error.code}]\n`);
    return exitFor(error.code);
  }
  io.stderr(`dispatch-once ${command.name}: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  return EXIT_CODES.error;
}

/** Dispatch-Once error codes (spec §11) the ledger answers an operator with. */
function exitFor(code: string): number {
  switch (code) {
    case "stale_claim":
    case "resolution_refused":
    case "result_not_storable":
      return EXIT_CODES.refused;
    case "invalid_ledger_input":
    // The conversation store's refusal of a flag (`turns --table-prefix ""`), as the ledger's above.
    case "invalid_store_input":
    case "invalid_argument":
    case "invalid_key_input":
    case "invalid_tool_definition":
      return EXIT_CODES.usage;
    default:
      return EXIT_CODES.error;
  }
}
