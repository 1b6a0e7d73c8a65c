#!/usr/bin/env node
// A wqrun pool worker in Node.js (docs/workers.md): one JSON request per
// line on stdin, one JSON reply per line on stdout, stderr for logging.
// The same job as examples/pool_python.py: words and a hash of payload.text;
// "fail_until": n fails until the n-th attempt, "bad": true for good.
'use strict';
const crypto = require('crypto');
const readline = require('readline');

function handle(job) {
  const p = job.payload || {};
  if (p.bad) return { error: 'refused: marked bad', permanent: true };
  if ((job.attempt || 1) < (p.fail_until || 0))
    return { error: `not yet (attempt ${job.attempt})`, retry_in: 0.05 };
  const text = p.text || '';
  return {
    result: {
      words: text.split(/\s+/).filter((w) => w).length,
      sha256: crypto.createHash('sha256').update(text).digest('hex').slice(0, 16),
      worker: 'node',
    },
  };
}

const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
rl.on('line', (line) => {
  let reply;
  try {
    reply = handle(JSON.parse(line));
  } catch (e) {
    reply = { error: String(e) };
  }
  process.stdout.write(JSON.stringify(reply) + '\n');
});
