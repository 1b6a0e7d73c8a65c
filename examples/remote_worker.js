#!/usr/bin/env node
// remote_worker.js: a remote worker for examples/remote.lua's "thumbs" queue,
// in Node.js with nothing but its standard library (SPEC 10.2): claims photos
// over HTTP (a long poll, 10 at a time), works out each thumbnail's size (at
// most 256x256, aspect kept) and reports the results in one batch.
//
//   node examples/remote_worker.js [URL] [--token T]
//
// A photo without a size fails for good ("permanent"); one over 100
// megapixels is retried once after a second ("retry_in"). Ctrl-C stops it.
"use strict";
const http = require("http");

const args = process.argv.slice(2);
const base = new URL(args[0] && !args[0].startsWith("--") ? args[0] : "http://127.0.0.1:8080");
const ti = args.indexOf("--token");
const token = ti >= 0 ? args[ti + 1] : process.env.WQRUN_TOKEN;
const agent = new http.Agent({ keepAlive: true });
let stopping = false;

function post(path, body) {
  return new Promise((resolve, reject) => {
    const data = JSON.stringify(body);
    const headers = { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(data) };
    if (token) headers.Authorization = "Bearer " + token;
    const req = http.request({ host: base.hostname, port: base.port, path: "/queues/thumbs" + path,
      method: "POST", headers, agent }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (c) => (text += c));
      res.on("end", () => (res.statusCode === 200 ? resolve(JSON.parse(text))
        : reject(new Error(path + ": " + res.statusCode + " " + text))));
    });
    req.on("error", reject);
    req.end(data);
  });
}

// The outcome of one photo: {result} or {error, permanent, retry_in}.
function thumbnail(item) {
  const p = item.payload || {};
  if (!p.w || !p.h) return { error: "no size for " + item.key + ": nothing to scale", permanent: true };
  if (p.w * p.h > 100e6 && item.attempt === 1) return { error: p.w + "x" + p.h + ": too big for now", retry_in: 1 };
  const scale = Math.min(1, 256 / Math.max(p.w, p.h));
  const w = Math.max(1, Math.round(p.w * scale)), h = Math.max(1, Math.round(p.h * scale));
  console.log(`${item.key.padEnd(12)} ${p.w}x${p.h} -> ${w}x${h} (attempt ${item.attempt})`);
  return { result: { w, h } };
}

async function main() {
  process.on("SIGINT", () => (stopping = true));
  process.on("SIGTERM", () => (stopping = true));
  console.log("working on thumbs at " + base.origin + " (Ctrl-C to stop)");
  while (!stopping) {
    let items;
    try {
      items = await post("/claim", { max: 10, wait: 2, lease: 30 });
    } catch (e) {
      console.error("worker: " + e.message + "; again in 1 s");
      await new Promise((r) => setTimeout(r, 1000));
      continue;
    }
    const done = [], failed = [];
    for (const it of items) {
      const o = thumbnail(it);
      if (o.error) failed.push({ key: it.key, token: it.token, error: o.error,
        ...(o.permanent ? { permanent: true } : {}), ...(o.retry_in ? { retry_in: o.retry_in } : {}) });
      else done.push({ key: it.key, token: it.token, result: o.result });
    }
    if (done.length) await post("/done", done);
    if (failed.length) await post("/fail", failed);
  }
  agent.destroy();
}

main().catch((e) => { console.error("worker: " + e.message); process.exit(1); });
