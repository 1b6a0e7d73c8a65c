#!/usr/bin/env node
// Medians of `<name> <value> <unit>` lines read from stdin (lines starting
// with `#` are skipped, and reading stops at run.sh's "# ==== medians" line,
// so that its own output is not counted again), in the order names first
// appear, with the lowest and highest value and the count. --md prints a
// Markdown table instead.
import { readFileSync } from "node:fs";

const md = process.argv.includes("--md");
const seen = new Map();
for (const line of readFileSync(0, "utf8").split("\n")) {
  if (line.startsWith("# ==== medians")) break;
  if (!line || line.startsWith("#")) continue;
  const [name, value, unit] = line.trim().split(/\s+/);
  const v = Number(value);
  if (!name || !Number.isFinite(v)) continue;
  if (!seen.has(name)) seen.set(name, { unit, values: [] });
  seen.get(name).values.push(v);
}

const median = (a) => {
  const s = [...a].sort((x, y) => x - y);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const fmt = (v) => (Math.abs(v) >= 100 ? Math.round(v).toString() : Number(v.toPrecision(3)).toString());

if (md) {
  console.log("| measure | median | unit | min | max | runs |");
  console.log("| --- | ---: | --- | ---: | ---: | ---: |");
}
for (const [name, { unit, values }] of seen) {
  const med = median(values);
  const lo = Math.min(...values);
  const hi = Math.max(...values);
  if (md) console.log(`| ${name} | ${fmt(med)} | ${unit} | ${fmt(lo)} | ${fmt(hi)} | ${values.length} |`);
  else console.log(`${name} ${fmt(med)} ${unit}  # median of ${values.length}, min ${fmt(lo)}, max ${fmt(hi)}`);
}
