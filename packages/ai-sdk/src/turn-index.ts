import { InvalidArgumentError } from "@dispatch-once/core";

/**
 * The turn index of the request that carries `messages` (AISDK-1): the number of user messages,
 * counting a UIMessage whose `id` an earlier user message has as that message sent again: the
 * request is then in that message's turn.
 *
 * Works on the app's `UIMessage[]` (what `useChat` sends) and on `ModelMessage[]` alike: both
 * carry `role`. Everything that replays a turn keeps it: a regenerate drops the assistant's
 * answer and sends the same user messages again; a resubmit after a cut stream sends them
 * again; an approval (or a client-side tool result) is added to the assistant message (UI) or
 * sent as a `tool` message (model), never as a user message. A new user message is a new turn.
 *
 * @example
 * turnIndexOf([{ role: "user", parts: [...] }]) // 1
 */
export function turnIndexOf(messages: readonly { role: string }[]): number {
  if (!Array.isArray(messages)) throw new InvalidArgumentError("messages", "must be the app's message array");
  let users = 0;
  let turn = 0;
  // A UIMessage's id names the user's message: one that comes again (a server that appends the
  // client's last message to the chat it saved in onFinish, when the client re-sends it after a
  // cut) is that message sent again, in its first sending's turn, not a new turn with new keys.
  const turns = new Map<string, number>();
  for (const message of messages) {
    if (message?.role !== "user") continue;
    const id = (message as { id?: unknown }).id;
    const earlier = typeof id === "string" ? turns.get(id) : undefined;
    if (earlier !== undefined) {
      turn = earlier;
      continue;
    }
    turn = ++users;
    if (typeof id === "string") turns.set(id, turn);
  }
  return turn;
}

/**
 * The id of the user message whose turn the request answers (AISDK-17): the `id` of the message
 * `turnIndexOf` counted last (a message sent again keeps its first sending's turn, and its id), or
 * undefined when that message has no string id (model messages carry none).
 */
export function turnMessageIdOf(messages: readonly { role: string }[]): string | undefined {
  let last: string | undefined;
  for (const message of messages) {
    if (message?.role !== "user") continue;
    const id = (message as { id?: unknown }).id;
    last = typeof id === "string" ? id : undefined;
  }
  return last;
}
