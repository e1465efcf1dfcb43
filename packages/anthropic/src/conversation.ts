import type Anthropic from "@anthropic-ai/sdk";
import type { FailedTurnRecord } from "./record.js";

export type UserContent = string | Anthropic.Messages.ContentBlockParam[];

export interface ConversationSnapshot {
  conversationId: string;
  /** The committed history, exactly what the next request sends. */
  messages: Anthropic.Messages.MessageParam[];
  /** Assistant turns committed so far, which is the next turn's index (spec TURN-1). */
  turnCount: number;
  /** The user message the conversation is currently answering, if any. */
  pendingMessageId: string | undefined;
}

export interface TurnCommit {
  turnIndex: number;
  assistant: Anthropic.Messages.MessageParam;
  /** The user message carrying the tool results, when the turn stopped for tool use. */
  toolResults?: Anthropic.Messages.MessageParam;
  stopReason: string | null;
}

export interface AppendResult {
  /** False when the message id was already present: a re-send, a redelivery, a double click (TURN-2). */
  appended: boolean;
  /** True when the conversation already answered this message (a later turn ended it). */
  answered: boolean;
}

/**
 * Where the conversation lives. Implementations must make appendUserMessage idempotent on
 * the message id (TURN-2) and commitTurn a compare-and-append on the turn index (TURN-5).
 */
export interface ConversationStore {
  appendUserMessage(conversationId: string, message: { id: string; content: UserContent }): Promise<AppendResult>;
  load(conversationId: string): Promise<ConversationSnapshot>;
  /** Appends the turn iff exactly `commit.turnIndex` turns are committed; returns whether it did. */
  commitTurn(conversationId: string, commit: TurnCommit): Promise<{ committed: boolean }>;
  /** Failed turns are kept beside the conversation, never in it (RECORD-1). */
  recordFailedTurn(record: FailedTurnRecord): Promise<void>;
  failedTurns(conversationId: string): Promise<FailedTurnRecord[]>;
}

interface MemoryConversation {
  messages: Anthropic.Messages.MessageParam[];
  turnCount: number;
  userMessages: Map<string, { answered: boolean }>;
  pending: string | undefined;
  failed: FailedTurnRecord[];
}

/** An in-process ConversationStore; each method is atomic because it never awaits. */
export class MemoryConversationStore implements ConversationStore {
  private readonly conversations = new Map<string, MemoryConversation>();

  async appendUserMessage(conversationId: string, message: { id: string; content: UserContent }): Promise<AppendResult> {
    const conversation = this.get(conversationId);
    const known = conversation.userMessages.get(message.id);
    if (known !== undefined) return { appended: false, answered: known.answered };
    conversation.userMessages.set(message.id, { answered: false });
    conversation.messages.push({ role: "user", content: structuredClone(message.content) });
    conversation.pending = message.id;
    return { appended: true, answered: false };
  }

  async load(conversationId: string): Promise<ConversationSnapshot> {
    const conversation = this.get(conversationId);
    return {
      conversationId,
      messages: structuredClone(conversation.messages),
      turnCount: conversation.turnCount,
      pendingMessageId: conversation.pending,
    };
  }

  async commitTurn(conversationId: string, commit: TurnCommit): Promise<{ committed: boolean }> {
    const conversation = this.get(conversationId);
    if (conversation.turnCount !== commit.turnIndex) return { committed: false };
    conversation.messages.push(structuredClone(commit.assistant));
    if (commit.toolResults !== undefined) conversation.messages.push(structuredClone(commit.toolResults));
    conversation.turnCount++;
    if (commit.stopReason !== "tool_use" && conversation.pending !== undefined) {
      conversation.userMessages.set(conversation.pending, { answered: true });
      conversation.pending = undefined;
    }
    return { committed: true };
  }

  async recordFailedTurn(record: FailedTurnRecord): Promise<void> {
    this.get(record.conversationId).failed.push(structuredClone(record));
  }

  async failedTurns(conversationId: string): Promise<FailedTurnRecord[]> {
    return structuredClone(this.get(conversationId).failed);
  }

  private get(conversationId: string): MemoryConversation {
    let conversation = this.conversations.get(conversationId);
    if (conversation === undefined) {
      conversation = { messages: [], turnCount: 0, userMessages: new Map(), pending: undefined, failed: [] };
      this.conversations.set(conversationId, conversation);
    }
    return conversation;
  }
}
