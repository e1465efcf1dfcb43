/** Worker-thread entry: runs the naive side of the chaos run and posts progress and the result. */
import { parentPort, workerData } from "node:worker_threads";
import { runSide, type SideOptions, type WorkerMessage } from "./chaos.js";

const port = parentPort;
if (port === null) throw new Error("chaos-worker must run in a worker thread");
const post = (message: WorkerMessage) => port.postMessage(message);
runSide({ ...(workerData as SideOptions), onProgress: (progress) => post({ type: "progress", progress }) }, false).then(
  (result) => post({ type: "result", result }),
  (error: unknown) => {
    const e = error instanceof Error ? error : new Error(String(error));
    post({ type: "error", message: e.message, ...(e.stack !== undefined ? { stack: e.stack } : {}) });
  },
);
