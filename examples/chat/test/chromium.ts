import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Readable, Writable } from "node:stream";

/** Debian's chromium, as the demo's report test uses it (turbo passes CHROMIUM_PATH through). */
export const CHROMIUM = process.env["CHROMIUM_PATH"] ?? "/usr/bin/chromium";

/**
 * Headless Chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`:
 * JSON messages, NUL-terminated, written to its fd 3 and read from its fd 4). No WebSocket
 * client, no browser download: the system package only.
 */
export class Browser {
  private nextId = 1;
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void; method: string }>();
  private buffer = "";
  private sessionId = "";
  private readonly profile: string;
  private readonly child: ChildProcess;
  /** Console messages and uncaught page errors, for assertions and failure messages. */
  readonly console: string[] = [];

  private constructor() {
    if (!existsSync(CHROMIUM)) {
      throw new Error(`Chromium not found at ${CHROMIUM}: install Debian's chromium package or set CHROMIUM_PATH`);
    }
    this.profile = mkdtempSync(join(tmpdir(), "chat-chromium-"));
    this.child = spawn(
      CHROMIUM,
      [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        `--user-data-dir=${this.profile}`, "--remote-debugging-pipe", "about:blank",
      ],
      { stdio: ["ignore", "ignore", "ignore", "pipe", "pipe"] },
    );
    const output = this.child.stdio[4] as Readable;
    output.setEncoding("utf8");
    output.on("data", (chunk: string) => this.receive(chunk));
    this.child.once("exit", (code) => {
      for (const p of this.pending.values()) p.reject(new Error(`chromium exited (${code}) during ${p.method}`));
      this.pending.clear();
    });
  }

  static async launch(): Promise<Browser> {
    const browser = new Browser();
    const { targetInfos } = (await browser.command("Target.getTargets")) as { targetInfos: { targetId: string; type: string }[] };
    const page = targetInfos.find((t) => t.type === "page");
    const targetId = page?.targetId ?? ((await browser.command("Target.createTarget", { url: "about:blank" })) as { targetId: string }).targetId;
    const attached = (await browser.command("Target.attachToTarget", { targetId, flatten: true })) as { sessionId: string };
    browser.sessionId = attached.sessionId;
    await browser.command("Runtime.enable", {}, true);
    await browser.command("Page.enable", {}, true);
    return browser;
  }

  private receive(chunk: string): void {
    this.buffer += chunk;
    let end: number;
    while ((end = this.buffer.indexOf("\0")) !== -1) {
      const message = JSON.parse(this.buffer.slice(0, end)) as {
        id?: number;
        result?: unknown;
        error?: { message: string };
        method?: string;
        params?: Record<string, unknown>;
      };
      this.buffer = this.buffer.slice(end + 1);
      if (message.id !== undefined) {
        const p = this.pending.get(message.id);
        this.pending.delete(message.id);
        if (message.error !== undefined) p?.reject(new Error(`${p.method}: ${message.error.message}`));
        else p?.resolve(message.result);
      } else if (message.method === "Runtime.consoleAPICalled") {
        const args = (message.params?.["args"] as { value?: unknown }[] | undefined) ?? [];
        this.console.push(args.map((a) => String(a.value)).join(" "));
      } else if (message.method === "Runtime.exceptionThrown") {
        this.console.push(`exception: ${JSON.stringify(message.params?.["exceptionDetails"])}`);
      }
    }
  }

  private command(method: string, params: Record<string, unknown> = {}, inPage = false): Promise<unknown> {
    const id = this.nextId++;
    const input = this.child.stdio[3] as Writable;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject, method });
      input.write(JSON.stringify({ id, method, params, ...(inPage ? { sessionId: this.sessionId } : {}) }) + "\0");
    });
  }

  async goto(url: string): Promise<void> {
    await this.command("Page.navigate", { url }, true);
    await this.waitFor(`document.readyState === "complete" && location.href === ${JSON.stringify(url)}`);
  }

  /** Evaluate an expression in the page (awaiting a promise) and return its JSON value. */
  async evaluate<T>(expression: string): Promise<T> {
    const reply = (await this.command("Runtime.evaluate", { expression, awaitPromise: true, returnByValue: true }, true)) as {
      result: { value?: unknown };
      exceptionDetails?: { text: string; exception?: { description?: string } };
    };
    if (reply.exceptionDetails !== undefined) {
      throw new Error(`page: ${reply.exceptionDetails.exception?.description ?? reply.exceptionDetails.text}`);
    }
    return reply.result.value as T;
  }

  /** Poll until the expression is truthy in the page; fails with what the page shows. */
  async waitFor(expression: string, timeoutMs = 20_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (await this.evaluate<boolean>(`Boolean(${expression})`)) return;
      if (Date.now() > deadline) {
        const html = await this.evaluate<string>("document.body ? document.body.innerHTML : ''").catch(() => "?");
        throw new Error(`timed out waiting for ${expression}\npage: ${html}\nconsole: ${this.console.join("\n")}`);
      }
      await new Promise((r) => setTimeout(r, 25));
    }
  }

  async close(): Promise<void> {
    const exited = new Promise<void>((resolve) => {
      if (this.child.exitCode !== null || this.child.signalCode !== null) resolve();
      else this.child.once("exit", () => resolve());
    });
    await this.command("Browser.close").catch(() => undefined);
    const timer = setTimeout(() => this.child.kill("SIGKILL"), 5_000);
    await exited;
    clearTimeout(timer);
    rmSync(this.profile, { recursive: true, force: true });
  }
}
