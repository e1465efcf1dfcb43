// The conformance subject for the NATS JetStream KV ledger (conformance/README.md "Writing the subject module").
// raw.* reads and writes the bucket with the NATS client directly, never through the adapter.
import { randomUUID } from "node:crypto";
import { connect } from "nats";
import { skewProcessClock } from "@dispatch-once/conformance/ledger";
import { NatsLedger } from "./src/nats-ledger.mjs";

const servers = process.env.NATS_URL ?? "127.0.0.1:4222";
let admin;
const adminConn = () => (admin ??= connect({ servers }));
const enc = new TextEncoder();
const dec = new TextDecoder();

const name = (key) => {
  const b = Buffer.alloc(key.length * 2);
  for (let i = 0; i < key.length; i++) b.writeUInt16LE(key.charCodeAt(i), i * 2);
  return `k.${b.toString("base64url")}`;
};
/** The entry's header and texts, read by hand: `{header}\n` then request, result, error as UTF-8. */
const parse = (bytes) => {
  const nl = bytes.indexOf(10);
  const h = JSON.parse(dec.decode(bytes.subarray(0, nl)));
  let at = nl + 1;
  const [request, result, error] = h.sec.map((len) => {
    if (len < 0) return undefined;
    const s = dec.decode(bytes.subarray(at, at + len));
    at += len;
    return s;
  });
  return { h, request, result, error };
};
const frame = (h, request, result, error) => {
  const parts = [request ?? "", result ?? "", error ?? ""].map((s) => enc.encode(s));
  const head = enc.encode(`${JSON.stringify({ ...h, sec: [parts[0].length, result === undefined ? -1 : parts[1].length, error === undefined ? -1 : parts[2].length] })}\n`);
  return Buffer.concat([head, ...parts]);
};

/** @type {import("@dispatch-once/conformance/ledger").LedgerSubject} */
const subject = {
  name: "ledger-nats (trial)",
  capabilities: { sharedAcrossProcesses: true, survivesRestart: true, corruption: true, unavailability: true, clockSkew: true, listExpiredInFlight: true, retire: true, silentStore: true },
  limits: { operationBoundMs: 300 },
  async create({ retentionMs, maxResultBytes } = {}) {
    const bucket = `h_trialnats_${randomUUID().replaceAll("-", "").slice(0, 20)}`;
    const instances = [];
    const open = async () => {
      const l = await NatsLedger.open({ servers, bucket, retentionMs, maxResultBytes, allowShortRetentionForTests: true });
      instances.push(l);
      return l;
    };
    const ledger = await open();
    const nc = await adminConn();
    const js = nc.jetstream();
    const kv = await js.views.kv(bucket, { bindOnly: true });
    const storeNow = async () => {
      await kv.put("clock", new Uint8Array(0));
      return (await kv.get("clock")).created.getTime();
    };
    const rewrite = async (key, change) => {
      const e = await kv.get(name(key));
      if (e === null || e.operation !== "PUT") return;
      const { h, request, result, error } = parse(e.value);
      await change(h);
      await kv.update(name(key), frame(h, request, result, error), e.revision);
    };
    return {
      ledger,
      reopen: open,
      raw: {
        async read(key) {
          const e = await kv.get(name(key));
          if (e === null || e.operation !== "PUT") return undefined;
          const { h, request, result, error } = parse(e.value);
          if (h.row === null) return undefined;
          const r = h.row;
          const row = { key, state: r.state, toolName: r.toolName, effect: r.effect, fence: r.fence, claimedAt: r.claimedAt, request };
          for (const f of ["conversationId", "turnIndex", "owner", "leaseExpiresAt", "reason", "finishedAt"]) if (r[f] !== undefined) row[f] = r[f];
          if (result !== undefined) row.result = result;
          if (r.resultRef !== undefined) {
            const parts = [];
            for (let i = 0; i < r.resultRef.n; i++) parts.push((await kv.get(`r.${r.resultRef.id}.${i}`)).value);
            row.result = dec.decode(Buffer.concat(parts));
          }
          if (error !== undefined) row.error = JSON.parse(error);
          return row;
        },
        expireLease: (key) => rewrite(key, async (h) => void (h.row.leaseExpiresAt = (await storeNow()) - 1)),
        expireRetention: (key) => rewrite(key, async (h) => void (h.row.expiresAt = (await storeNow()) - 1)),
        async corrupt(key) {
          const e = await kv.get(name(key));
          if (e !== null && e.operation === "PUT") {
            // The row made unreadable (an unknown format version), its retention deadline left as it was.
            const { h, request, result, error } = parse(e.value);
            h.v = 99;
            await kv.put(name(key), frame(h, request, result, error));
          } else {
            await kv.put(name(key), enc.encode("not a ledger entry"));
          }
        },
        async expireRetired(key) {
          await rewrite(key, async (h) => {
            const now = await storeNow();
            for (const id of Object.keys(h.retired ?? {})) h.retired[id] = now - 1;
          });
        },
        storeAddress: async () => {
          const [host, port] = servers.split(":");
          return { host, port: Number(port) };
        },
        openVia: async (via) => {
          const l = await NatsLedger.open({ servers: `${via.host}:${via.port}`, bucket, migrate: false, operationTimeoutMs: 300, retentionMs, maxResultBytes, allowShortRetentionForTests: true });
          instances.push(l);
          return l;
        },
        disconnected: async () => NatsLedger.open({ servers: "127.0.0.1:1", bucket, migrate: false, operationTimeoutMs: 2000 }),
        skewedInstance: async (offsetMs) => skewProcessClock(await open(), offsetMs),
      },
      async destroy() {
        for (const l of instances) await l.close();
        const jsm = await nc.jetstreamManager();
        await jsm.streams.delete(`KV_${bucket}`).catch(() => {});
      },
    };
  },
};
export default subject;
