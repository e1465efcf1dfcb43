// @ts-check
/**
 * Type-aware lint for a protocol whose safety depends on awaiting: a claim, a completion or a
 * release that is not awaited can reorder against the tool run it guards. Run by `pnpm lint`
 * (scripts/lint-sources.mjs: tsc's check of tsconfig.lint.json, the whole workspace as one program,
 * and these typed rules over that same program object, not a second one: 80 s of CPU where the two
 * programs took 124; one program instead of one per package had taken eslint from 1m30 and 4.3 GB
 * to 30 s and 1.8 GB; then the .mjs check). `npx eslint .` alone still works, building its own.
 */
import tseslint from "typescript-eslint";

export default tseslint.config(
  {
    ignores: ["**/dist/**", "**/node_modules/**", "**/*.mjs", "**/*.cjs", "**/*.js", "**/*.d.ts"],
  },
  {
    files: ["packages/*/{src,test,examples}/**/*.ts", "apps/*/{src,test}/**/*.ts", "conformance/{src,test}/**/*.ts", "conformance/scripts/audit-survey.ts", "conformance-e2e/{src,test}/**/*.ts"],
    languageOptions: {
      parser: tseslint.parser,
      parserOptions: { project: ["./tsconfig.lint.json"], tsconfigRootDir: import.meta.dirname },
    },
    plugins: { "@typescript-eslint": tseslint.plugin },
    linterOptions: { reportUnusedDisableDirectives: "error" },
    rules: {
      // Core rule; the tests that build sparse arrays on purpose say so with a disable comment.
      "no-sparse-arrays": "error",
      "@typescript-eslint/no-floating-promises": "error",
      "@typescript-eslint/no-misused-promises": "error",
      "@typescript-eslint/await-thenable": "error",
    },
  },
);
