/**
 * Whether `text` is JSON text of the number `value` (`125000.0` and `1.25e+5` spell `125000`): a
 * scripted call may say how the model writes a number member (`spell`), never which number.
 */
export function spellsNumber(text: string, value: unknown): boolean {
  if (typeof value !== "number") return false;
  try {
    return JSON.parse(text) === value;
  } catch {
    return false;
  }
}
