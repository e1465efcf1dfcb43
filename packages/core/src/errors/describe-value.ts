/**
 * A short description of an untrusted value for an error message; never throws (a bigint,
 * a cycle, a revoked proxy or a throwing toString all get a description).
 */
export function describeValue(value: unknown): string {
  try {
    switch (typeof value) {
      case "string":
        return JSON.stringify(value.length > 80 ? `${value.slice(0, 80)}…` : value);
      case "bigint":
        return `${value}n`;
      case "symbol":
      case "function":
      case "undefined":
        return typeof value;
      case "object":
        if (value === null) return "null";
        return Array.isArray(value) ? "an array" : "an object";
      default:
        return String(value);
    }
  } catch {
    return "an unreadable value";
  }
}
