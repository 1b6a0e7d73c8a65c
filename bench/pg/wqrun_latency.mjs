// add->start latency of wqrun on PostgreSQL, measured like graphile.mjs's:
// N adds one at a time with `select wqrun.add(...)` (autocommit), each after
// the previous one started; the runner prints each job's start time.
//   WQRUN=build/wqrun DATABASE_URL=... node wqrun_latency.mjs N [--gap MS]
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import path from "node:path";
import pg from "pg";

const here = path.dirname(fileURLToPath(import.meta.url));
const n = Number(process.argv[2] || 1000);
const gi = process.argv.indexOf("--gap");
const gap = gi > 0 ? Number(process.argv[gi + 1]) : 2;
const url = process.env.DATABASE_URL;
const wall = () => performance.timeOrigin + performance.now(); // ms, wall clock
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const db = new pg.Client({ connectionString: url });
await db.connect();
await db.query("select 1");
const mig = spawn(process.env.WQRUN, ["migrate", "--db", url], { stdio: "inherit" });
await new Promise((r) => mig.on("exit", r));
const kid = spawn(process.env.WQRUN, ["--quiet", "--serve", "--db", url, path.join(here, "lua/latency.lua")], {
  stdio: ["ignore", "pipe", "inherit"],
});
const waiting = new Map();
const starts = new Map();
createInterface({ input: kid.stdout }).on("line", (line) => {
  const [key, t] = line.split(" ");
  starts.set(key, Number(t) * 1000);
  const w = waiting.get(key);
  if (w) w();
});
await sleep(1000);
const one = async (id) => {
  const key = String(id);
  const seen = new Promise((r) => waiting.set(key, r));
  const t = wall();
  await db.query("select wqrun.add('lat', $1)", [key]);
  const c = wall();
  await seen;
  return [t, c];
};
for (let i = 0; i < 100; i++) await one(-1 - i); // warm-up, not counted
await sleep(1000);
const fromAdd = [], fromCommit = [];
for (let id = 0; id < n; id++) {
  const [t, c] = await one(id);
  const s = starts.get(String(id));
  fromAdd.push(s - t);
  fromCommit.push(s - c);
  if (gap > 0) await sleep(gap);
}
kid.kill("SIGTERM");
await new Promise((r) => kid.on("exit", r));
await db.end();
fromAdd.sort((a, b) => a - b);
fromCommit.sort((a, b) => a - b);
const pct = (a, p) => a[Math.max(0, Math.min(a.length - 1, Math.ceil((p / 100) * a.length) - 1))];
console.log(`# ${n} jobs added one at a time (select wqrun.add(...), autocommit), each after the previous one started and ${gap} ms of idle; one runner, 24 workers`);
for (const p of [50, 90, 99]) console.log(`wqrun_latency_p${p}_ms ${pct(fromAdd, p).toFixed(3)} ms`);
console.log(`wqrun_latency_max_ms ${fromAdd[fromAdd.length - 1].toFixed(3)} ms`);
for (const p of [50, 99]) console.log(`wqrun_latency_commit_p${p}_ms ${pct(fromCommit, p).toFixed(3)} ms`);
