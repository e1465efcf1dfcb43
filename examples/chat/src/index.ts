export { createChatBackend, MODEL, paymentInput, type ChatBackend, type ChatBackendOptions } from "./backend.js";
export {
  createChatApp,
  MESSAGE_ID_HEADER,
  MESSAGE_ID_PATTERN,
  CONVERSATION_PATTERN,
  type ChatAppOptions,
  type ChatAnswer,
  type ChatStreamEvent,
} from "./app.js";
export { problem, problemForSendError, PROBLEM_BASE, type ChatProblem } from "./problem.js";
export { chatModel } from "./model.js";
