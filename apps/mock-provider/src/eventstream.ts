import { crc32 } from "node:zlib";

/**
 * The AWS event-stream binary framing (`application/vnd.amazon.eventstream`) Amazon Bedrock's
 * `InvokeModelWithResponseStream` answers in, as `@smithy/eventstream-codec` reads it: a 12-byte
 * prelude (total length, headers length, both big-endian uint32, then the CRC32 of those 8 bytes),
 * the headers, the payload, and the CRC32 of everything before it. A header is its name's length
 * (1 byte), the name, a type byte (7: string) and the value's length (2 bytes) and UTF-8 bytes.
 * node:zlib has `crc32` from Node 20.15 (the engines field says >= 20.19).
 */
export function encodeEventStreamMessage(headers: Readonly<Record<string, string>>, payload: Buffer): Buffer {
  const headerParts: Buffer[] = [];
  for (const [name, value] of Object.entries(headers)) {
    const nameBytes = Buffer.from(name, "utf8");
    const valueBytes = Buffer.from(value, "utf8");
    const part = Buffer.alloc(1 + nameBytes.length + 1 + 2 + valueBytes.length);
    let at = part.writeUInt8(nameBytes.length, 0);
    at += nameBytes.copy(part, at);
    at = part.writeUInt8(7, at);
    at = part.writeUInt16BE(valueBytes.length, at);
    valueBytes.copy(part, at);
    headerParts.push(part);
  }
  const headerBytes = Buffer.concat(headerParts);
  const total = 12 + headerBytes.length + payload.length + 4;
  const message = Buffer.alloc(total);
  message.writeUInt32BE(total, 0);
  message.writeUInt32BE(headerBytes.length, 4);
  message.writeUInt32BE(crc32(message.subarray(0, 8)), 8);
  headerBytes.copy(message, 12);
  payload.copy(message, 12 + headerBytes.length);
  message.writeUInt32BE(crc32(message.subarray(0, total - 4)), total - 4);
  return message;
}

/** One Messages API stream event as Bedrock sends it: a `chunk` event whose payload is `{"bytes": base64 of the event's JSON}`. */
export function bedrockChunk(data: unknown): Buffer {
  const bytes = Buffer.from(JSON.stringify(data), "utf8").toString("base64");
  return encodeEventStreamMessage(
    { ":event-type": "chunk", ":content-type": "application/json", ":message-type": "event" },
    Buffer.from(JSON.stringify({ bytes }), "utf8"),
  );
}

/**
 * A mid-stream error as Bedrock sends it: an `exception` message named by `:exception-type`
 * (`throttlingException`, `modelStreamErrorException`, `internalServerException`, ...) with
 * `{"message": ...}` as its payload.
 */
export function bedrockException(exceptionType: string, message: string): Buffer {
  return encodeEventStreamMessage(
    { ":exception-type": exceptionType, ":content-type": "application/json", ":message-type": "exception" },
    Buffer.from(JSON.stringify({ message }), "utf8"),
  );
}

/**
 * The Bedrock exception an in-stream API error is sent as: its type when it names one already
 * (`throttlingException`), else `modelStreamErrorException` (the API's `overloaded_error` and its
 * like surface there, as Bedrock wraps an error the model's stream raised).
 */
export function bedrockExceptionType(errorType: string): string {
  return /^[a-z][A-Za-z]*Exception$/.test(errorType) ? errorType : "modelStreamErrorException";
}
