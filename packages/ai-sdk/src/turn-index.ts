import { InvalidArgumentError } from "@dispatch-once/core";

/**
 * The turn index of the request that carries `messages` (AISDK-1): the number of user messages.
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
  for (const message of messages) if (message?.role === "user") users++;
  return users;
}
