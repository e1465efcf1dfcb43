// Comparing JSON data without making canonical text: the dispatcher's replay check (a stored
// request against a call's arguments) and the runner's message-content check (TURN-20).

/**
 * Whether `b` is the same JSON data as `a`, where `a` is known to have a canonical form (so its
 * depth is bounded and it has no cycle): then their canonical texts are equal. Strict where
 * canonicalize is strict (plain objects and arrays only, an undefined member is absent); false
 * whenever in doubt, including when reading throws, and the caller then compares canonical text.
 */
export function sameJsonData(a: unknown, b: unknown): boolean {
  try {
    return sameData(a, b);
  } catch {
    return false;
  }
}

export function sameData(a: unknown, b: unknown): boolean {
  if (a === b && (typeof a !== "object" || a === null)) return true;
  if (typeof a !== "object" || a === null || typeof b !== "object" || b === null) return false;
  if (!isPlainContainer(a) || !isPlainContainer(b)) return false;
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) {
      if (!Object.prototype.hasOwnProperty.call(b, i) || !sameData(a[i], b[i])) return false;
    }
    return true;
  }
  if (Array.isArray(b)) return false;
  const ra = a as Record<string, unknown>;
  const rb = b as Record<string, unknown>;
  let count = 0;
  for (const name of Object.keys(ra)) {
    const value = ra[name];
    if (value === undefined) continue;
    count++;
    if (!Object.prototype.hasOwnProperty.call(rb, name) || !sameData(value, rb[name])) return false;
  }
  let countB = 0;
  for (const name of Object.keys(rb)) if (rb[name] !== undefined) countB++;
  return count === countB;
}

/** A plain array or object with nothing JSON.stringify would drop (no symbol or non-enumerable member). */
function isPlainContainer(value: object): boolean {
  if (Object.getOwnPropertySymbols(value).length !== 0) return false;
  if (Array.isArray(value)) return Object.getOwnPropertyNames(value).length === value.length + 1;
  const proto = Object.getPrototypeOf(value) as unknown;
  return (proto === null || proto === Object.prototype) && Object.getOwnPropertyNames(value).length === Object.keys(value).length;
}
