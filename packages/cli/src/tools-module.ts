import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { ToolRegistry, type ToolDefinition } from "@dispatch-once/core";
import { ToolsModuleError } from "./errors/tools-module-error.js";

/**
 * Import the application's tool registry from a module (see the README, "The tools module"):
 * its `tools` export, else its `default` export, each a ToolRegistry, an array of tool
 * definitions, or a (possibly async) function returning one of those. Checked by duck typing:
 * the module's copy of @dispatch-once/core need not be the CLI's.
 */
export async function loadToolsModule(modulePath: string, cwd: string = process.cwd()): Promise<ToolRegistry> {
  const absolute = resolve(cwd, modulePath);
  if (!existsSync(absolute)) throw new ToolsModuleError(modulePath, `no such file (resolved to ${absolute})`);
  let namespace: Record<string, unknown>;
  try {
    namespace = (await import(pathToFileURL(absolute).href)) as Record<string, unknown>;
  } catch (error) {
    const hint = /\.(c|m)?tsx?$/.test(absolute) ? " (a TypeScript module needs a loader: run node --import tsx $(which dispatch-once) ...)" : "";
    throw new ToolsModuleError(modulePath, `import failed: ${(error as Error)?.message ?? String(error)}${hint}`, { cause: error });
  }
  const exported = "tools" in namespace ? namespace["tools"] : namespace["default"];
  if (exported === undefined) {
    throw new ToolsModuleError(modulePath, "exports neither `tools` nor a default export; export your ToolRegistry as one of them");
  }
  let value: unknown = exported;
  if (typeof value === "function" && !isRegistry(value)) {
    try {
      value = await (value as () => unknown)();
    } catch (error) {
      throw new ToolsModuleError(modulePath, `its tools factory threw: ${(error as Error)?.message ?? String(error)}`, { cause: error });
    }
  }
  try {
    if (isRegistry(value)) return new ToolRegistry((value as { list(): ToolDefinition[] }).list());
    if (Array.isArray(value)) return new ToolRegistry(value as ToolDefinition[]);
  } catch (error) {
    // An invalid definition (InvalidToolDefinitionError): the registry would refuse it in the app too.
    throw new ToolsModuleError(modulePath, (error as Error).message, { cause: error });
  }
  throw new ToolsModuleError(modulePath, "its tools export is not a ToolRegistry, an array of tool definitions, or a function returning one");
}

function isRegistry(value: unknown): boolean {
  return typeof value === "object" && value !== null && typeof (value as { list?: unknown }).list === "function" && typeof (value as { get?: unknown }).get === "function";
}
