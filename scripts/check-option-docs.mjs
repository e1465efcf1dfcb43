#!/usr/bin/env node
// Every option a package exports is documented where users read it (editor hovers, generated
// docs), as p-queue documents its options: each member of an exported `…Options`, `…Config` or
// `…Policy` interface in a package's src has a doc comment with at least one `@example`, and an
// optional member also a `@default` (what leaving it out means: a value, or a sentence where
// there is no single one). Run by `pnpm lint`; prints each member that lacks them.
import { readFileSync, readdirSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import ts from "typescript";

const root = new URL("..", import.meta.url).pathname;
const dirs = readdirSync(join(root, "packages")).map((d) => join(root, "packages", d, "src"));
const files = dirs.flatMap((d) => walk(d)).filter((f) => f.endsWith(".ts") && !f.endsWith(".d.ts"));

function walk(dir) {
  let out = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    out = statSync(p).isDirectory() ? out.concat(walk(p)) : out.concat(p);
  }
  return out;
}

const problems = [];
let members = 0;
for (const file of files) {
  const source = ts.createSourceFile(file, readFileSync(file, "utf8"), ts.ScriptTarget.Latest, true);
  source.forEachChild(function visit(node) {
    if (!ts.isInterfaceDeclaration(node) || !/(Options|Config|Policy)$/.test(node.name.text)) return;
    if (!node.modifiers?.some((m) => m.kind === ts.SyntaxKind.ExportKeyword)) return;
    for (const member of node.members) {
      if (!ts.isPropertySignature(member) && !ts.isMethodSignature(member)) continue;
      members++;
      const tags = ts.getJSDocTags(member).map((t) => t.tagName.text);
      const docs = ts.getJSDocCommentsAndTags(member).length > 0;
      const name = `${node.name.text}.${member.name.getText(source)}`;
      const missing = [];
      if (!docs) missing.push("doc comment");
      if (member.questionToken !== undefined && !tags.includes("default")) missing.push("@default");
      if (!tags.includes("example")) missing.push("@example");
      if (missing.length > 0) {
        const { line } = source.getLineAndCharacterOfPosition(member.getStart(source));
        problems.push(`${relative(root, file)}:${line + 1} ${name}: no ${missing.join(", no ")}`);
      }
    }
  });
}

if (problems.length > 0) {
  console.error(`${problems.length} of ${members} exported options lack their docs (@default, @example):\n${problems.join("\n")}`);
  process.exit(1);
}
console.log(`option docs: ${members} exported options, each with @default and @example`);
