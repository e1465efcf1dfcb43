// One delivery of a queued message: `node dist/worker.js <conversationId> <messageId> <text>`;
// prints one JSON line, what the user is told. A process per delivery: SIGKILL/SIGSTOP are literal.
import { openApp } from "./app.js";
const [conversationId, messageId, text] = process.argv.slice(2);
if (conversationId === undefined || messageId === undefined || text === undefined) { console.error("usage: worker <conversation> <message> <text>"); process.exit(2); }
const app = await openApp(process.env);
try { console.log(JSON.stringify(await app.handle(conversationId, messageId, text))); }
catch (error) { console.log(JSON.stringify({ status: "threw", text: String(error) })); }
finally { await app.close().catch((e: unknown) => console.warn("close:", (e as Error).message)); }
process.exit(0);
