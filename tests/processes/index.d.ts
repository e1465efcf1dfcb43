/**
 * The path of a plain-JavaScript copy of a TypeScript process entry, written beside it as
 * `<name>.compiled.mjs`: the entry and its relative imports bundled, packages left to node's own
 * resolution (so they load from their builds, as an adopter's process would). A test spawns
 * `node <that path>` where it spawned `node --import tsx <entry>`.
 */
export declare function compiledEntry(entry: string): string;

/** One textual change of a mutant: `from` (exactly once in `file`, a path relative to the entry's directory) becomes `to`. */
export interface SourcePatch {
  file: string;
  from: string;
  to: string;
}

/** A mutant of a package's own source for a blind round (conformance/README.md, round K). */
export interface SourceMutant {
  id: string;
  /** The rule the mutation breaks. */
  rule: string;
  /** The real-world cause: how such a line gets written. */
  cause: string;
  /** Files relative to src/. */
  patches: SourcePatch[];
}

/**
 * The path of a bundled copy of a package's entry (`<package>/test/.tmp/mutants/<id>.compiled.mjs`)
 * with the patches applied to its sources as they load; the sources themselves are not written.
 * Throws when a patch's `from` does not occur exactly once, or its file is not in the bundle.
 */
export declare function mutatedEntry(entry: string, id: string, patches: readonly SourcePatch[]): Promise<string>;

/** A small seeded generator (mulberry32): numbers in [0, 1), the same for the same seed, so a failing case can be named by its seed and replayed. */
export declare function prng(seed: number): () => number;

/**
 * The distinct AsyncLocalStorage instances whose `run` is called while `f` runs (every storage that
 * ever ran stays in Node 20's list for good and is walked on every promise: a wrapper must not make
 * one per instance).
 */
export declare function asyncStoragesRunBy(f: () => Promise<void>): Promise<Set<import("node:async_hooks").AsyncLocalStorage<unknown>>>;

/**
 * A conversation store as a worker paused at its commit sees it (a GC pause, a SIGSTOP): `commitTurn`
 * and `renewLease` never return; `reached` resolves once one of them was called.
 */
export declare function pausedAtCommit<S extends object>(store: S): { store: S; reached: Promise<void> };
