#!/usr/bin/python3
"""The dashboard's live updates (GET /events) in a real headless Chromium.

Run by tests/e2e/test_dashboard_live.sh against a wqrun that runs its
live.lua (queue live: slow-1..3 running, dead-1..3 dead letters; queue
other). The page is opened with ?refresh=60: its own refresh comes once a
minute, so only the event stream can explain a change seen sooner. Each
check makes a change through the HTTP API and measures the time from just
before the call to the moment the page's DOM shows it (a MutationObserver in
the page stamps it with Date.now(), the same clock as time.time() here); it
must be under LIMIT_MS. Prints one line per check and the latencies; exits 1
on the first failure.

usage: dashboard_live.py BASE
"""
import atexit
import json
import os
import random
import sys
import time
import urllib.error
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

BASE = sys.argv[1]
LIMIT_MS = 500
sys.stdout.reconfigure(line_buffering=True)
driver = None
checks = 0
latencies = {}


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    if driver is not None:
        try:
            print("     page: " + driver.current_url, file=sys.stderr)
            print("     text: " + driver.find_element(By.TAG_NAME, "body").text[:1500]
                  .replace("\n", "\n           "), file=sys.stderr)
        except WebDriverException:
            pass
    sys.exit(1)


def ok(msg):
    global checks
    checks += 1
    print("ok - " + msg)


def api(method, path, body=None):
    """(status, parsed JSON or text) of a request to the runner."""
    req = urllib.request.Request(BASE + path, method=method,
                                 data=None if body is None else json.dumps(body).encode())
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def call(method, path, body=None):
    status, d = api(method, path, body)
    if status // 100 != 2:
        fail("%s %s: %s %s" % (method, path, status, d))
    return d


def wait(what, cond, timeout=6.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    fail("timed out waiting for: " + what)


def js(script, *args):
    return driver.execute_script(script, *args)


# What the page shows, read in the page (one call, no stale elements). A
# condition is [kind, ...]: ["paused", text] the queue page's badge reads text;
# ["overview", queue, text] the overview's badge of queue; ["row", table, key]
# the table has the key's row; ["gone", table, key] it has not; ["progress",
# key, text] the item's progress reads text.
SHOWN_FN = """
function shown(c) {
const rows = (t) => Array.from(document.querySelectorAll('#' + t + ' tbody tr'));
const row = (t, k) => rows(t).find((r) => r.getAttribute('data-key') === k);
switch (c[0]) {
case 'paused': {
  const b = document.querySelector('#q-head [data-field="paused"]');
  return !!b && b.textContent === c[1];
}
case 'overview': {
  const r = rows('queues').find((x) => x.getAttribute('data-queue') === c[1]);
  const b = r && r.querySelector('[data-field="paused"]');
  return !!b && b.textContent === c[2];
}
case 'row': return !!row(c[1], c[2]);
case 'gone': return !!document.getElementById(c[1]) && !row(c[1], c[2]) ||
  !document.getElementById(c[1]) && !!document.getElementById('q-' + c[1]);
case 'progress': {
  const r = row('items', c[1]);
  const p = r && r.querySelector('[data-field="progress"]');
  return !!p && p.textContent.includes(c[2]);
}
}
throw new Error('unknown condition ' + c[0]);
}
"""
SHOWN = SHOWN_FN + "return shown(arguments[0]);"

# Installs a MutationObserver that stamps window.liveSeen with Date.now() the
# first time every condition of arguments[0] holds.
WATCH = SHOWN_FN + """
const conds = arguments[0];
const all = () => conds.every((c) => shown(c));
if (window.liveObs) window.liveObs.disconnect();
window.liveSeen = null;
if (all()) return 'already';
window.liveObs = new MutationObserver(() => {
  if (window.liveSeen === null && all()) { window.liveSeen = Date.now(); window.liveObs.disconnect(); }
});
window.liveObs.observe(document.documentElement, {subtree: true, childList: true, characterData: true,
  attributes: true});
return 'watching';
"""


def shown(*conds):
    return all(js(SHOWN, list(c)) for c in conds)


def measure(what, conds, method, path, body=None, limit=LIMIT_MS):
    """Watches for conds, makes the API call, returns the ms until the page showed them."""
    state = js(WATCH, [list(c) for c in conds])
    if state != "watching":
        fail("%s: shown before the API call (%s)" % (what, state))
    # at a random moment: just after one of the page's refreshes (then the next one waits for
    # the rest of its 150 ms gap) or long after
    time.sleep(random.uniform(0, 0.4))
    t0 = time.time()
    call(method, path, body)
    deadline = t0 + 5
    seen = None
    while time.time() < deadline:
        seen = js("return window.liveSeen")
        if seen is not None:
            break
        time.sleep(0.02)
    if seen is None:
        fail("%s: not shown within 5 s of %s %s (the page's own refresh is every 60 s)" % (what, method, path))
    ms = seen - t0 * 1000
    latencies.setdefault(what.split(" ")[0], []).append(ms)
    if ms > limit:
        fail("%s: shown %.0f ms after %s %s (want within %d ms)" % (what, ms, method, path, limit))
    ok("%s: shown %.0f ms after %s %s" % (what, ms, method, path))
    return ms


def events_state():
    return js("return document.documentElement.dataset.events || ''")


# ------------------------------------------------------------------ the runner settled
def settled():
    q = {x["name"]: x for x in call("GET", "/queues")}["live"]
    return q["processing"] == 3 and q["dead"] == 3


wait("live: 3 running, 3 dead letters", settled)

# ------------------------------------------------------------------ the browser
opts = webdriver.ChromeOptions()
opts.binary_location = os.environ.get("CHROMIUM", "/usr/bin/chromium")
for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
          "--disable-extensions", "--no-first-run", "--window-size=1280,900"):
    opts.add_argument(a)
opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
try:
    driver = webdriver.Chrome(service=Service(os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")),
                              options=opts)
except WebDriverException as e:
    driver = None
    fail("cannot start headless chromium: %s" % e.msg)
atexit.register(driver.quit)
driver.set_page_load_timeout(10)

# ------------------------------------------------------------------ a queue's page
driver.get(BASE + "/?refresh=60#/queue/live")
wait("live's page: slow-1..3 running, dead-1..3 dead, the event stream open",
     lambda: shown(*[("row", "items", "slow-%d" % i) for i in (1, 2, 3)],
                   *[("row", "dead", "dead-%d" % i) for i in (1, 2, 3)]) and events_state() == "open")
ok("live's page lists its running items and dead letters; the event stream is open")

for i in range(3):
    measure("pause (round %d)" % (i + 1), [("paused", "paused")], "POST", "/queues/live/pause")
    measure("resume (round %d)" % (i + 1), [("paused", "running")], "POST", "/queues/live/resume")

for i in (1, 2, 3):
    measure("cancel of running slow-%d" % i, [("gone", "items", "slow-%d" % i)],
            "POST", "/queues/live/items/slow-%d/cancel" % i)

for i in (1, 2, 3):
    measure("retry of dead letter dead-%d" % i,
            [("gone", "dead", "dead-%d" % i), ("row", "items", "dead-%d" % i)],
            "POST", "/queues/live/dead/dead-%d/retry" % i)

# progress: prog-N reports 25 as it starts, 50 after 1.5 s, then a table
for i in (1, 2):
    key = "prog-%d" % i
    measure("progress 25%% of %s after its add" % key, [("progress", key, "25%")],
            "POST", "/queues/live/items", {"key": key})
t0 = time.time()
# the bar is read as the 50% is seen (1.5 s later the progress is a table, without a bar)
value = wait("prog-1's progress 50%", lambda: js(
    SHOWN_FN + "if (!shown(['progress', 'prog-1', '50%'])) return null;"
    "const r = Array.from(document.querySelectorAll('#items tbody tr'))"
    ".find((x) => x.getAttribute('data-key') === 'prog-1');"
    "const b = r.querySelector('[data-field=\"progress\"] progress');"
    "return [b ? b.value : null];"), 4)[0]
if value != 50:
    fail("prog-1's progress bar holds %r, not 50" % value)
ok("prog-1's progress moves on while it runs: 50%, with a bar at 50")
wait("prog-1's progress as a table", lambda: shown(("progress", "prog-1", '"upload"')), 4)
text = js("const r = Array.from(document.querySelectorAll('#items tbody tr'))"
          ".find((x) => x.getAttribute('data-key') === 'prog-1');"
          "return r.querySelector('[data-field=\"progress\"]').textContent")
try:
    value = json.loads(text)
except ValueError:
    value = None
# compact (no space), the value given
if " " in text or value != {"stage": "upload", "files": 3}:
    fail("prog-1's table progress reads %r (job:progress gave {stage = \"upload\", files = 3})" % text)
ok("a table progress is shown as compact JSON: %s" % text)
# the API's list carries it too, on both backends: read from where it is stored (on PostgreSQL
# the job's row), it may come a moment after the event the page drew
deadline = time.time() + 3
while True:
    api_value = [i for i in call("GET", "/queues/live/items")["items"] if i["key"] == "prog-1"][0].get("progress")
    if api_value == value or time.time() > deadline:
        break
    time.sleep(0.05)
if api_value != value:
    fail("GET /queues/live/items has prog-1's progress %s, the page %s" % (json.dumps(api_value), text))
ok("GET /queues/live/items has prog-1's progress as the page shows it")

# ------------------------------------------------------------------ the overview: all events
driver.get(BASE + "/?refresh=60")
wait("the overview with its event stream open",
     lambda: shown(("overview", "other", "running")) and events_state() == "open")
for i in range(2):
    measure("pause on the overview (round %d)" % (i + 1), [("overview", "other", "paused")],
            "POST", "/queues/other/pause")
    measure("resume on the overview (round %d)" % (i + 1), [("overview", "other", "running")],
            "POST", "/queues/other/resume")

errs = [e for e in driver.get_log("browser") if e.get("source") == "javascript"]
if errs:
    fail("JavaScript errors: %s" % errs)
ok("no JavaScript error")

# ------------------------------------------------------------------ a stream that drops
# Every fetch of /events goes through a wrapper (installed before the page's
# script runs) that lets the test break the one open now.
WRAP = """
(() => {
  const real = window.fetch.bind(window);
  window.liveStreams = 0;
  window.fetch = (url, opts) => {
    if (String(url).startsWith('/events')) {
      if (window.liveNoEvents)
        return Promise.resolve(new Response('{"error":"no such route"}', {status: 404}));
      const ctl = new AbortController();
      if (opts && opts.signal) opts.signal.addEventListener('abort', () => ctl.abort());
      window.liveCut = () => ctl.abort();
      window.liveStreams++;
      return real(url, Object.assign({}, opts, {signal: ctl.signal}));
    }
    return real(url, opts);
  };
})();
"""
wrap = driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": WRAP})
driver.get(BASE + "/?refresh=59#/queue/live")  # a new document (not only a new #), with the wrapper
wait("live's page with its stream open", lambda: shown(("paused", "running")) and events_state() == "open")
js("window.liveCut()")
wait("the page sees its stream break", lambda: events_state() != "open", 2)
wait("the stream opened again", lambda: events_state() == "open" and js("return window.liveStreams") == 2, 3)
ok("a stream that breaks is opened again (%d fetches of /events)" % js("return window.liveStreams"))
measure("pause after the stream was opened again", [("paused", "paused")], "POST", "/queues/live/pause")
call("POST", "/queues/live/resume")

# ------------------------------------------------------------------ a runner without /events
driver.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", {"identifier": wrap["identifier"]})
wrap = driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument",
                              {"source": "window.liveNoEvents = true;" + WRAP})
driver.get(BASE + "/?refresh=1#/queue/live")
wait("live's page polled, without a stream", lambda: shown(("paused", "running")) and events_state() == "off")
t0 = time.time()
call("POST", "/queues/live/pause")
wait("the pause shown by the page's own refresh (every second)", lambda: shown(("paused", "paused")), 3)
polled = time.time() - t0
alarm = js("return [document.getElementById('error').textContent, document.getElementById('conn').className,"
           " document.getElementById('conn').textContent]")
if alarm[0] or alarm[1] == "off" or not alarm[2].startswith("live"):
    fail("a runner without /events: the page says %r" % alarm)
ok("a runner without /events (404): polled (the pause shown after %.1f s), no error shown, header %r"
   % (polled, alarm[2]))
call("POST", "/queues/live/resume")

errs = [e for e in driver.get_log("browser") if e.get("source") == "javascript"]
if errs:
    fail("JavaScript errors: %s" % errs)

print("latencies, API call -> shown in the page (ms): " + "; ".join(
    "%s %s" % (k, " ".join("%.0f" % v for v in vs)) for k, vs in latencies.items()))
print("dashboard_live.py: %d checks passed" % checks)
