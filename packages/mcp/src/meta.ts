/**
 * Where the key travels in MCP (proposed spec MCP-1, MCP-2). `tools/call` has no idempotency
 * key; its `params._meta` is open, and MCP's key-name rules reserve unprefixed and MCP-owned
 * prefixes, and ask for reverse-DNS prefixes (2025-11-25 revision). The project's home is the
 * GitHub organisation `dispatch-once`, so the prefix is `io.github.dispatch-once/`: a namespace
 * anyone can check the owner of, whose second label (`github`) is outside MCP's reserved space.
 */
export const META_PREFIX = "io.github.dispatch-once/";

/** The `_meta` member of a `tools/call` request that carries the call's idempotency key (MCP-1). */
export const IDEMPOTENCY_KEY_META = `${META_PREFIX}idempotency-key`;

/** The `_meta` member of a tool result that carries a Dispatch-Once error's machine-readable form (MCP-6). */
export const ERROR_META = `${META_PREFIX}error`;

/** The `_meta` member of a tool result that says it was answered from the ledger (MCP-5). */
export const REPLAYED_META = `${META_PREFIX}replayed`;

/**
 * The `_meta` member of a replayed tool result whose call differed from the stored request outside
 * the tool's identity (IDENT-3, MCP-10): the arguments that ran, which are what the user was done for.
 */
export const STORED_ARGUMENTS_META = `${META_PREFIX}stored-arguments`;

/**
 * What the guard accepts as a key (MCP-3): core's 32 hex digits, and also other clients' keys
 * (a UUID, a ULID) in a URL-safe alphabet. At least 16 characters, because a short key is
 * guessable and collides across conversations; at most 200 so it fits the ledger's identity.
 */
export const IDEMPOTENCY_KEY_PATTERN = /^[A-Za-z0-9_.:~-]{16,200}$/;

/**
 * The `_meta` member of a tool definition in `tools/list` that advertises the tool's identity
 * (MCP-11), and of a `tools/call` request that says which identity its key was derived from: a
 * server that compares other arguments refuses the call instead of taking its key for another.
 */
export const IDENTITY_META = `${META_PREFIX}identity`;

/** The `_meta` member of a tool definition in `tools/list` that advertises the tool's effect class (MCP-11). */
export const EFFECT_META = `${META_PREFIX}effect`;

/**
 * The `_meta` member of a `tools/call` request that says which turn the call belongs to:
 * `{ conversationId, turnIndex }`, the context its key was derived from (MCP-15). The guard stores
 * it on the call's ledger row (LIST-3), inside its namespace, so that a re-run of the turn can ask
 * for the effects of earlier attempts its own answer does not tell.
 */
export const TURN_META = `${META_PREFIX}turn`;

/**
 * The JSON-RPC method by which a client asks a guarding server for the ledger rows claimed at a
 * turn of a conversation (MCP-15). Params `{ conversationId, turnIndex }`; result
 * `{ listed: true, calls }` or `{ listed: false, reason, calls }`.
 */
export const TURN_CALLS_METHOD = `${META_PREFIX}turnCalls`;
