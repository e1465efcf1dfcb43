/**
 * The path of a plain-JavaScript copy of a TypeScript process entry, written beside it as
 * `<name>.compiled.mjs`: the entry and its relative imports bundled, packages left to node's own
 * resolution (so they load from their builds, as an adopter's process would). A test spawns
 * `node <that path>` where it spawned `node --import tsx <entry>`.
 */
export declare function compiledEntry(entry: string): string;
