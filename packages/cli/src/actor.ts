import { userInfo } from "node:os";
import type { CliIo } from "./context.js";
import { UsageError } from "./errors/usage-error.js";

/**
 * Who an audited change is made by (RESOLVE-7): `--actor`, else the OS user name. A person's
 * name, never the tool's, so an audit trail says who settled a row.
 */
export function actorOf(values: Record<string, unknown>, io: CliIo, command: string): string {
  const given = values["actor"];
  const actor = (typeof given === "string" ? given : osUser(io))?.trim();
  if (actor === undefined || actor === "") throw new UsageError("no actor: pass --actor <name> (the OS user name is unknown here)", command);
  return actor;
}

function osUser(io: CliIo): string | undefined {
  try {
    return userInfo().username;
  } catch {
    return io.env["USER"] ?? io.env["LOGNAME"] ?? io.env["USERNAME"];
  }
}
