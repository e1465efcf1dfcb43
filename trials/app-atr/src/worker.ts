// One queue delivery per process: node dist/worker.js <conversation> <message id> <text>. Prints one JSON line.
import { handle, openApp } from "./app.js";
const [conversationId, messageId, text] = process.argv.slice(2) as [string, string, string];
const app = await openApp();
try {
  const told = await handle(app, conversationId, messageId, text);
  console.log(JSON.stringify(told));
} finally {
  await app.close();
}
