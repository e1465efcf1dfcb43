/**
 * Redis Cluster hash slots, computed here so that a row and its in-flight index entry can be
 * written by one script: a script may only touch keys of one slot, so the index of a row lives in
 * a sorted set whose hash tag lands in the row's own slot. There are 16384 slots, so 16384 index
 * keys at most; a single node uses the same layout, so rows and indexes stay valid if a
 * deployment moves to a cluster.
 */

export const SLOT_COUNT = 16384;

// CRC16-CCITT (XModem), the function Redis Cluster hashes keys with.
const TABLE = new Uint16Array(256);
for (let i = 0; i < 256; i++) {
  let crc = i << 8;
  for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  TABLE[i] = crc;
}

function crc16(bytes: Uint8Array, start: number, end: number): number {
  let crc = 0;
  for (let i = start; i < end; i++) crc = ((crc << 8) & 0xffff) ^ TABLE[((crc >> 8) ^ bytes[i]!) & 0xff]!;
  return crc;
}

/**
 * The slot Redis gives a key: the hash of the text between the first `{` and the first `}`
 * after it when that text is not empty, otherwise of the whole key (UTF-8 bytes, as ioredis sends them).
 */
export function keySlot(key: string): number {
  let start = 0;
  let end = key.length;
  const open = key.indexOf("{");
  if (open >= 0) {
    // Braces are ASCII: their index in the string and in its UTF-8 bytes mark the same text.
    const close = key.indexOf("}", open + 1);
    if (close > open + 1) {
      start = open + 1;
      end = close;
    }
  }
  return hash(key, start, end) & (SLOT_COUNT - 1);
}

/** CRC16 of the UTF-8 bytes of key[start, end): straight from the char codes when they are ASCII. */
function hash(key: string, start: number, end: number): number {
  let crc = 0;
  for (let i = start; i < end; i++) {
    const c = key.charCodeAt(i);
    if (c >= 0x80) {
      const bytes = Buffer.from(key.slice(start, end), "utf8");
      return crc16(bytes, 0, bytes.length);
    }
    crc = ((crc << 8) & 0xffff) ^ TABLE[((crc >> 8) ^ c) & 0xff]!;
  }
  return crc;
}

let tags: string[] | undefined;

/**
 * For every slot, a short tag (base 36, no braces) whose hash is that slot. Found by counting
 * upwards, once per process (about 170 000 hashes of 1 to 4 bytes, about 10 ms).
 */
export function slotTags(): readonly string[] {
  if (tags !== undefined) return tags;
  const found: string[] = new Array<string>(SLOT_COUNT);
  let missing = SLOT_COUNT;
  for (let n = 0; missing > 0; n++) {
    const tag = n.toString(36);
    let crc = 0; // the tag is ASCII: hash its char codes, no Buffer per candidate
    for (let i = 0; i < tag.length; i++) crc = ((crc << 8) & 0xffff) ^ TABLE[((crc >> 8) ^ tag.charCodeAt(i)) & 0xff]!;
    const slot = crc & (SLOT_COUNT - 1);
    if (found[slot] === undefined) {
      found[slot] = tag;
      missing--;
    }
  }
  tags = found;
  return found;
}
