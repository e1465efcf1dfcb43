import type { DemoResult } from "./run.js";
export function renderReport(result: DemoResult): string { return `<html><body>${result.seed}</body></html>`; }
