// A vite plugin for blind round L: applies one mutant's patch to a package's own source as vitest
// loads it (the file on disk is never written). A patch whose text does not occur exactly once
// throws, so a mutant that no longer applies fails loudly instead of running the unmutated source.
import { readFileSync, writeFileSync } from "node:fs";

/** @param {{ id: string; abs: string; find: string; replace: string; marker: string }} mutant */
export function mutantPlugin(mutant) {
  return {
    name: "blind-l-mutant",
    enforce: "pre",
    /** @param {string} id */
    load(id) {
      const path = id.split("?")[0];
      if (path !== mutant.abs) return null;
      const text = readFileSync(path, "utf8");
      const at = text.indexOf(mutant.find);
      if (at < 0 || text.indexOf(mutant.find, at + 1) >= 0) {
        throw new Error(`blind-l mutant ${mutant.id}: its patch occurs ${at < 0 ? "nowhere" : "more than once"} in ${path}`);
      }
      writeFileSync(mutant.marker, "applied\n");
      return text.slice(0, at) + mutant.replace + text.slice(at + mutant.find.length);
    },
  };
}
