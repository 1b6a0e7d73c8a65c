#!/usr/bin/env node
// graphile-worker, measured on the database given by DATABASE_URL (a fresh,
// empty database: the caller makes one per measure with scripts/pg.sh
// createdb). Prints one result per line as `<name> <value> <unit>`; lines
// starting with `#` are comments.
//
//   node graphile.mjs burndown N [CONCURRENCY] [--procs P] [--plain] [--no-analyze]
//   node graphile.mjs enqueue N [--batch B]
//   node graphile.mjs latency N [--plain]
//
// Workers always run in child processes of this one (the parent only loads
// jobs, coordinates and measures), started with graphile-worker's run() and
// its documented fast settings (https://worker.graphile.org/docs/performance):
// concurrency 24, pool 25, localQueue { size: 500 }, completeJobBatchDelay 0,
// failJobBatchDelay 0, pollInterval left at its default. --plain runs
// graphile-worker's defaults instead (no local queue, no batched completion).
//
// Clocks: process.hrtime.bigint() is CLOCK_MONOTONIC on Linux, one clock for
// every process on the machine, so times taken in the producer and in a
// worker process compare directly.
import { fork, execFileSync } from "node:child_process";
import { readFileSync, readdirSync } from "node:fs";
import { fileURLToPath } from "node:url";
import pg from "pg";

const SELF = fileURLToPath(import.meta.url);
const TASK = "noop";
const SCHEMA = "graphile_worker";

const now = () => process.hrtime.bigint();
const ms = (ns) => Number(ns) / 1e6;
const sleep = (t) => new Promise((r) => setTimeout(r, t));
const out = (name, value, unit) => console.log(`${name} ${value} ${unit}`);
const note = (s) => console.log(`# ${s}`);

function die(msg) {
  console.error(`graphile.mjs: ${msg}`);
  process.exit(1);
}

function parseArgs(argv) {
  const pos = [];
  const opt = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a.startsWith("--")) {
      const [k, v] = a.slice(2).split("=", 2);
      if (v !== undefined) opt[k] = v;
      else if (["procs", "batch", "gap"].includes(k)) opt[k] = argv[++i];
      else opt[k] = true;
    } else pos.push(a);
  }
  return { pos, opt };
}

// The worker options every mode uses: the documented fast settings, or
// graphile-worker's defaults with --plain.
function workerOptions(concurrency, plain) {
  const base = {
    connectionString: process.env.DATABASE_URL,
    concurrency,
    maxPoolSize: concurrency + 1,
    noHandleSignals: true,
  };
  if (plain) return base;
  return {
    ...base,
    preset: {
      worker: {
        localQueue: { size: 500 },
        completeJobBatchDelay: 0,
        failJobBatchDelay: 0,
      },
    },
  };
}

// ---- PostgreSQL server CPU, from /proc: the postmaster's own time, the
// time of the children it has reaped (exited backends), and the time of the
// live children (backends, walwriter, checkpointer, autovacuum, ...).

const CLK_TCK = (() => {
  try {
    return Number(execFileSync("getconf", ["CLK_TCK"]).toString().trim()) || 100;
  } catch {
    return 100;
  }
})();

function statFields(pid) {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the command name, which is in parentheses and may hold spaces.
    return s.slice(s.lastIndexOf(")") + 2).split(" ");
  } catch {
    return null;
  }
}

// f[k] is field k+3 of proc(5): f[1] ppid, f[11] utime, f[12] stime, f[13] cutime, f[14] cstime.
function serverCpuSeconds(postmaster) {
  const f = statFields(postmaster);
  if (!f) return NaN;
  let ticks = +f[11] + +f[12] + +f[13] + +f[14];
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    const c = statFields(d);
    if (c && +c[1] === postmaster) ticks += +c[11] + +c[12];
  }
  return ticks / CLK_TCK;
}

// An exited backend's time shows nowhere while it is a zombie (not in its
// own stat, not yet in the postmaster's cutime): wait until the postmaster
// has reaped its exited children (2 s at most) before reading the time.
async function settledServerCpuSeconds(postmaster) {
  for (let i = 0; i < 100; i++) {
    let zombie = false;
    for (const d of readdirSync("/proc")) {
      if (!/^\d+$/.test(d)) continue;
      const c = statFields(d);
      if (c && c[0] === "Z" && +c[1] === postmaster) zombie = true;
    }
    if (!zombie) break;
    await sleep(20);
  }
  return serverCpuSeconds(postmaster);
}

async function postmasterPid(client) {
  const { rows } = await client.query("select pg_backend_pid() as pid");
  const f = statFields(rows[0].pid);
  return f ? +f[1] : 0;
}

// ---- Child worker processes.

function spawnWorkers(count, concurrency, plain, role) {
  const kids = [];
  for (let i = 0; i < count; i++) {
    const child = fork(SELF, ["__worker", String(concurrency), role, plain ? "plain" : "fast"], {
      stdio: ["ignore", "inherit", "inherit", "ipc"],
    });
    const kid = { child, count: 0, listeners: [] };
    kid.ready = new Promise((resolve) => {
      child.on("message", (m) => {
        if (m.type === "ready") resolve();
        else if (m.type === "count") kid.count = m.count;
        for (const l of kid.listeners) l(m);
      });
    });
    kid.exited = new Promise((resolve) => child.on("exit", resolve));
    child.on("exit", (code) => {
      if (code && !kid.stopping) die(`worker process exited with ${code}`);
    });
    kids.push(kid);
  }
  return kids;
}

function request(kid, msg, replyType) {
  return new Promise((resolve) => {
    const l = (m) => {
      if (m.type === replyType) {
        kid.listeners.splice(kid.listeners.indexOf(l), 1);
        resolve(m);
      }
    };
    kid.listeners.push(l);
    kid.child.send(msg);
  });
}

async function stopWorkers(kids) {
  const cpu = await Promise.all(
    kids.map((k) => {
      k.stopping = true;
      return request(k, { type: "stop" }, "stopped");
    }),
  );
  await Promise.all(kids.map((k) => k.exited));
  return cpu.reduce((s, m) => s + m.cpu, 0);
}

async function workerMain(concurrency, role, mode) {
  const { run, Logger } = await import("graphile-worker");
  const logger = new Logger(() => (level, message) => {
    if (level === "error") console.error(`graphile-worker: ${message}`);
  });
  let count = 0;
  let sent = 0;
  let runner = null;
  let cpu0 = null;
  const taskList = {
    [TASK]:
      role === "latency"
        ? async (payload) => {
            const t = now();
            count++;
            process.send({ type: "started", id: payload.id, t: String(t) });
          }
        : async () => {
            count++;
          },
  };
  const tick = setInterval(() => {
    if (count !== sent) {
      sent = count;
      process.send({ type: "count", count });
    }
  }, 10);
  process.on("message", async (m) => {
    if (m.type === "go") {
      cpu0 = process.cpuUsage();
      const t0 = now();
      runner = await run({
        ...workerOptions(concurrency, mode === "plain"),
        logger,
        taskList,
      });
      process.send({ type: "running", startup_ms: ms(now() - t0) });
    } else if (m.type === "stop") {
      const c = process.cpuUsage(cpu0);
      clearInterval(tick);
      process.send({ type: "count", count });
      process.send({ type: "stopped", cpu: (c.user + c.system) / 1e6 });
      await runner.stop();
      process.disconnect();
    }
  });
  process.send({ type: "ready" });
}

// ---- Modes.

async function migrate() {
  const { runMigrations, Logger } = await import("graphile-worker");
  const logger = new Logger(() => (level, message) => {
    if (level === "error") console.error(`graphile-worker: ${message}`);
  });
  await runMigrations({ connectionString: process.env.DATABASE_URL, logger });
}

async function burndown(n, concurrency, procs, plain, analyze) {
  await migrate();
  const db = new pg.Client({ connectionString: process.env.DATABASE_URL });
  await db.connect();
  const pm = await postmasterPid(db);

  let t = now();
  await db.query(
    `select count(*) from ${SCHEMA}.add_jobs(array(
       select row($1, '{}'::json, null, null, null, null, null, null)::${SCHEMA}.job_spec
       from generate_series(1, $2)))`,
    [TASK, n],
  );
  note(`loaded ${n} jobs with one add_jobs call in ${ms(now() - t).toFixed(0)} ms`);
  if (analyze) {
    t = now();
    await db.query(
      `analyze ${SCHEMA}._private_jobs, ${SCHEMA}._private_tasks, ${SCHEMA}._private_job_queues`,
    );
    note(`ANALYZE in ${ms(now() - t).toFixed(0)} ms`);
  } else note("no ANALYZE after the load (--no-analyze)");

  const kids = spawnWorkers(procs, concurrency, plain, "burndown");
  await Promise.all(kids.map((k) => k.ready));

  const pg0 = await settledServerCpuSeconds(pm);
  const t0 = now();
  const running = kids.map((k) => request(k, { type: "go" }, "running"));
  // Wait until the tasks have run N times, then until the last completions
  // are committed (the table is empty).
  for (;;) {
    const done = kids.reduce((s, k) => s + k.count, 0);
    if (done >= n) break;
    await sleep(5);
  }
  for (;;) {
    const { rows } = await db.query(`select count(*)::int as c from ${SCHEMA}._private_jobs`);
    if (rows[0].c === 0) break;
    await sleep(2);
  }
  const wall = ms(now() - t0) / 1e3;
  const pg1 = await settledServerCpuSeconds(pm);
  const startup = (await Promise.all(running)).map((m) => m.startup_ms.toFixed(0));
  const nodeCpu = await stopWorkers(kids);
  const ran = kids.reduce((s, k) => s + k.count, 0);
  await db.end();

  const name = `graphile${plain ? "_plain" : ""}_burndown_p${procs}`;
  note(
    `${n} jobs, ${procs} worker process(es) x concurrency ${concurrency}, ${ran} task runs, ` +
      `${wall.toFixed(3)} s (run() start-up ${startup.join(", ")} ms included), ` +
      `worker CPU ${nodeCpu.toFixed(2)} s, server CPU ${(pg1 - pg0).toFixed(2)} s`,
  );
  if (ran !== n) note(`WARNING: ${ran} task runs for ${n} jobs`);
  out(`${name}_jobs_per_s`, Math.round(n / wall), "jobs/s");
  out(`${name}_node_cpu_us_per_job`, ((nodeCpu / n) * 1e6).toFixed(1), "us/job");
  out(`${name}_pg_cpu_us_per_job`, (((pg1 - pg0) / n) * 1e6).toFixed(1), "us/job");
}

async function enqueue(n, batch) {
  await migrate();
  const { makeWorkerUtils } = await import("graphile-worker");
  const utils = await makeWorkerUtils({ connectionString: process.env.DATABASE_URL });
  const db = new pg.Client({ connectionString: process.env.DATABASE_URL });
  await db.connect();
  const pm = await postmasterPid(db);
  // One warm-up call, not counted: creates the task row and warms the pool.
  await utils.addJobs([{ identifier: TASK, payload: { i: -1 } }]);
  const pg0 = await settledServerCpuSeconds(pm);
  const cpu0 = process.cpuUsage();
  const t0 = now();
  for (let i = 0; i < n; i += batch) {
    const specs = [];
    for (let j = i; j < Math.min(n, i + batch); j++) specs.push({ identifier: TASK, payload: { i: j } });
    await utils.addJobs(specs);
  }
  const wall = ms(now() - t0) / 1e3;
  const c = process.cpuUsage(cpu0);
  const pg1 = await settledServerCpuSeconds(pm);
  const { rows } = await db.query(`select count(*)::int as c from ${SCHEMA}._private_jobs`);
  await utils.release();
  await db.end();
  if (rows[0].c !== n + 1) die(`expected ${n + 1} jobs in the table, found ${rows[0].c}`);
  note(`${n} jobs with addJobs (add_jobs) in calls of ${batch}, ${wall.toFixed(3)} s`);
  out(`graphile_enqueue_b${batch}_jobs_per_s`, Math.round(n / wall), "jobs/s");
  out(`graphile_enqueue_b${batch}_node_cpu_us_per_job`, ((((c.user + c.system) / 1e6) / n) * 1e6).toFixed(1), "us/job");
  out(`graphile_enqueue_b${batch}_pg_cpu_us_per_job`, (((pg1 - pg0) / n) * 1e6).toFixed(1), "us/job");
}

function pct(sorted, p) {
  const i = Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1);
  return sorted[Math.max(0, i)];
}

async function latency(n, plain, gapMs) {
  await migrate();
  const [kid] = spawnWorkers(1, plain ? 1 : 24, plain, "latency");
  await kid.ready;
  await request(kid, { type: "go" }, "running");
  const starts = new Map();
  const waiting = new Map();
  kid.listeners.push((m) => {
    if (m.type !== "started") return;
    starts.set(m.id, BigInt(m.t));
    const w = waiting.get(m.id);
    if (w) w();
  });
  const db = new pg.Client({ connectionString: process.env.DATABASE_URL });
  await db.connect();
  const add = `select ${SCHEMA}.add_job($1, json_build_object('id', $2::int, 't', $3::text))`;
  const one = async (id) => {
    const seen = new Promise((r) => waiting.set(id, r));
    const t = now();
    await db.query(add, [TASK, id, String(t)]); // autocommit: returns after the commit
    const c = now();
    await seen;
    return [t, c];
  };
  // Warm-up (not counted), then let the worker go idle.
  for (let i = 0; i < 100; i++) await one(-1 - i);
  await sleep(1000);
  const fromAdd = [];
  const fromCommit = [];
  for (let id = 0; id < n; id++) {
    const [t, c] = await one(id);
    const s = starts.get(id);
    fromAdd.push(ms(s - t));
    fromCommit.push(ms(s - c));
    if (gapMs > 0) await sleep(gapMs);
  }
  await db.end();
  await stopWorkers([kid]);
  fromAdd.sort((a, b) => a - b);
  fromCommit.sort((a, b) => a - b);
  const name = `graphile${plain ? "_plain" : ""}_latency`;
  note(
    `${n} jobs added one at a time (select add_job(...), autocommit), each after the previous ` +
      `one started and ${gapMs} ms of idle; worker: ${plain ? "defaults, concurrency 1" : "fast settings, concurrency 24"}`,
  );
  note(
    `add->start = from just before sending add_job to the task's first line; ` +
      `commit->start = from add_job's reply (the commit is done) to the task's first line`,
  );
  for (const p of [50, 90, 99]) out(`${name}_p${p}_ms`, pct(fromAdd, p).toFixed(3), "ms");
  out(`${name}_max_ms`, fromAdd[fromAdd.length - 1].toFixed(3), "ms");
  for (const p of [50, 99]) out(`${name}_commit_p${p}_ms`, pct(fromCommit, p).toFixed(3), "ms");
}

// ---- Main.

const { pos, opt } = parseArgs(process.argv.slice(2));
const mode = pos[0];
if (mode === "__worker") {
  await workerMain(Number(pos[1]), pos[2], pos[3]);
} else {
  if (!process.env.DATABASE_URL) die("DATABASE_URL is not set (a fresh database: scripts/pg.sh createdb NAME)");
  const n = Number(pos[1] || 0);
  if (!(n > 0)) die("usage: graphile.mjs burndown|enqueue|latency N ...");
  if (mode === "burndown") {
    await burndown(n, Number(pos[2] || 24), Number(opt.procs || 1), !!opt.plain, !opt["no-analyze"]);
  } else if (mode === "enqueue") {
    await enqueue(n, Number(opt.batch || 10000));
  } else if (mode === "latency") {
    await latency(n, !!opt.plain, Number(opt.gap ?? 2));
  } else die(`unknown mode ${mode}`);
}
