// The chat page: plain JS, no framework. Each message gets an id (crypto.randomUUID) that is sent
// as Idempotency-Key on the first send and on every re-send; the server answers the same id once.
"use strict";

const conversationId = new URLSearchParams(location.search).get("c") || sessionStorage.getItem("conversation") || `c-${crypto.randomUUID()}`;
sessionStorage.setItem("conversation", conversationId);
const messages = document.getElementById("messages");

document.getElementById("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  const input = document.getElementById("text");
  const text = input.value.trim();
  if (text === "") return;
  input.value = "";
  const user = document.createElement("div");
  user.className = "user";
  user.textContent = text;
  const bubble = document.createElement("div");
  bubble.className = "assistant";
  bubble.dataset.messageId = crypto.randomUUID();
  bubble.innerHTML = '<div class="body"></div><div class="status"></div>';
  messages.append(user, bubble);
  send(bubble, text).catch((error) => fail(bubble, text, { title: "Not answered yet", detail: String(error), retryable: "same_message" }));
});

/** The element holding an attempt's streamed text: one per (turn, attempt), so it can be dropped whole. */
function attemptSpan(bubble, turnIndex, attempt) {
  const body = bubble.querySelector(".body");
  let turn = body.querySelector(`[data-turn="${turnIndex}"]`);
  if (turn === null) {
    turn = document.createElement("span");
    turn.dataset.turn = String(turnIndex);
    body.append(turn);
  }
  let span = turn.querySelector(`[data-attempt="${attempt}"]`);
  if (span === null) {
    span = document.createElement("span");
    span.dataset.attempt = String(attempt);
    turn.append(span);
  }
  return span;
}

function setStatus(bubble, text) {
  bubble.querySelector(".status").textContent = text;
}

async function send(bubble, text) {
  bubble.dataset.state = "streaming";
  delete bubble.dataset.fromStore;
  delete bubble.dataset.reconciled;
  bubble.querySelector(".body").textContent = "";
  setStatus(bubble, "");
  bubble.querySelector("button.resend")?.remove();
  const response = await fetch(`/api/conversations/${encodeURIComponent(conversationId)}/messages`, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "text/event-stream", "idempotency-key": bubble.dataset.messageId },
    body: JSON.stringify({ text }),
  });
  const type = response.headers.get("content-type") || "";
  if (!type.startsWith("text/event-stream")) {
    // An error known before anything streamed: a problem+json document with its real status.
    fail(bubble, text, await response.json().catch(() => ({ title: `HTTP ${response.status}`, retryable: "same_message" })));
    return;
  }
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) !== -1) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let name = "message";
      let data = "";
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) name = line.slice(7);
        else if (line.startsWith("data: ")) data += line.slice(6);
      }
      if (data !== "") handle(bubble, text, name, JSON.parse(data));
    }
  }
  if (bubble.dataset.state === "streaming") {
    fail(bubble, text, { title: "The connection was lost", detail: "the answer did not arrive", retryable: "same_message" });
  }
}

function handle(bubble, text, name, data) {
  if (name === "attempt") attemptSpan(bubble, data.turnIndex, data.attempt);
  else if (name === "text") attemptSpan(bubble, data.turnIndex, data.attempt).append(data.text);
  else if (name === "discard") {
    // That attempt is void: its text goes; the retry streams the turn anew.
    bubble.querySelector(`[data-turn="${data.turnIndex}"] [data-attempt="${data.attempt}"]`)?.remove();
    bubble.dataset.discarded = String(Number(bubble.dataset.discarded || 0) + 1);
    if (data.reason === "retry") setStatus(bubble, "The connection to the model dropped; retrying (nothing is done twice)…");
  } else if (name === "tool") {
    setStatus(bubble, data.ok ? `${data.name}: ${data.replayed ? "already done, not repeated" : "done"}` : `${data.name}: not settled yet`);
  } else if (name === "answer") {
    // The committed answer is authoritative: if what streamed differs (a late joiner, a stored
    // answer with nothing streamed), show the committed text.
    const body = bubble.querySelector(".body");
    if (body.textContent !== data.text) {
      body.textContent = "";
      for (const turn of data.turns) attemptSpan(bubble, turn.turnIndex, "committed").append(turn.text);
      bubble.dataset.reconciled = "true";
    }
    bubble.dataset.state = "answered";
    bubble.dataset.fromStore = String(data.fromStore);
    setStatus(bubble, data.fromStore ? "(the stored answer: nothing was run again)" : "");
    addResend(bubble, text, "Send again (same id)");
  } else if (name === "problem") fail(bubble, text, data);
}

function fail(bubble, text, problem) {
  bubble.dataset.state = "failed";
  bubble.dataset.problem = problem.code || "";
  const effects = (problem.effects || []).map((e) => `${e.name}: ${e.effect.replace(/_/g, " ")}`).join("; ");
  setStatus(bubble, [problem.title, effects].filter(Boolean).join(" — "));
  if (problem.retryable === "same_message") addResend(bubble, text, "Re-send");
}

function addResend(bubble, text, label) {
  bubble.querySelector("button.resend")?.remove();
  const button = document.createElement("button");
  button.className = "resend";
  button.type = "button";
  button.textContent = label;
  // The SAME message id: the server answers it once, however often it is sent.
  button.addEventListener("click", () => {
    send(bubble, text).catch((error) => fail(bubble, text, { title: "Not answered yet", detail: String(error), retryable: "same_message" }));
  });
  bubble.append(button);
}
