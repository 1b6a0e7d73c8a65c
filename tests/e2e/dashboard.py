#!/usr/bin/python3
"""The dashboard (GET /) in a real headless Chromium, driven by Selenium.

Run by tests/e2e/test_dashboard.sh against two running wqrun processes that
run tests/e2e/lua/dashboard.lua: BASE without a token, TBASE with --token
TOKEN. It checks the page against the HTTP API: the numbers of the overview,
the self-refresh, the rate sparkline, a queue's schedules and the groups its
limits hold back the most, the queue page (items, paging, dead
letters with hostile keys and errors shown as text), pause/resume, retry,
remove, cancel, the error display of a failed action, the token prompt, and
the event stream with the token (the live updates themselves:
dashboard_live.py).
Prints one line per check; exits 1 on the first failure.

usage: dashboard.py BASE TBASE TOKEN [SCREENSHOT_DIR]
"""
import atexit
import json
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

T0 = time.time()  # the runner started shortly before (the script starts it first)

from selenium import webdriver
from selenium.common.exceptions import (NoSuchElementException, StaleElementReferenceException,
                                        TimeoutException, WebDriverException)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

from live_page import steady

BASE, TBASE, TOKEN = sys.argv[1], sys.argv[2], sys.argv[3]
SHOTS = sys.argv[4] if len(sys.argv) > 4 else None
BAD = "bad <&\"'/% ü key"  # the dead letter of tests/e2e/lua/dashboard.lua
ODD = "k <&\"'/% é 日本 /x"  # added to idle through the API during the test
checks = 0
sys.stdout.reconfigure(line_buffering=True)
driver = None


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    if driver is not None:
        try:
            print("     page: " + driver.current_url, file=sys.stderr)
            print("     text: " + driver.find_element(By.TAG_NAME, "body").text[:1500]
                  .replace("\n", "\n           "), file=sys.stderr)
            if SHOTS:
                driver.save_screenshot(os.path.join(SHOTS, "failure.png"))
                print("     screenshot: " + os.path.join(SHOTS, "failure.png"), file=sys.stderr)
        except WebDriverException:
            pass
    sys.exit(1)


def ok(msg):
    global checks
    checks += 1
    print("ok - " + msg)


def api(method, path, body=None, token=None, base=None):
    """(status, parsed JSON or text) of a request to the runner."""
    req = urllib.request.Request((base or BASE) + path, method=method,
                                 data=None if body is None else json.dumps(body).encode())
    if token:
        req.add_header("Authorization", "Bearer " + token)
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


def queues(base=None, token=None):
    status, qs = api("GET", "/queues", base=base, token=token)
    if status != 200:
        fail("GET /queues: %s %s" % (status, qs))
    return {q["name"]: q for q in qs}


def all_items(name, base=None, token=None):
    """Every pending item of a queue, paging with after_key."""
    out, after = [], None
    for _ in range(100):
        q = "?limit=50" + ("" if after is None else "&after_key=" + urllib.parse.quote(after, safe=""))
        status, d = api("GET", "/queues/%s/items%s" % (name, q), base=base, token=token)
        if status != 200:
            fail("GET /queues/%s/items: %s %s" % (name, status, d))
        out += d["items"]
        after = d["next_after_key"]
        if after is None:
            return out
    fail("GET /queues/%s/items: paging does not end" % name)


def dead(name, base=None, token=None):
    status, d = api("GET", "/queues/%s/dead" % name, base=base, token=token)
    if status != 200:
        fail("GET /queues/%s/dead: %s %s" % (name, status, d))
    return d["dead"]


def wait(what, cond, timeout=6.0):
    """Polls cond() until it returns a true value (returned); fails after timeout."""
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            v = cond()
            if v:
                return v
        except (StaleElementReferenceException, NoSuchElementException, AttributeError) as e:
            # AttributeError: a row looked up is not (or no longer) there
            last = e
        time.sleep(0.05)
    fail("timed out waiting for: %s%s" % (what, " (%s)" % type(last).__name__ if last else ""))


def cell(row, field):
    return row.find_element(By.CSS_SELECTOR, '[data-field="%s"]' % field).text.strip()


def row(css, attr, value):
    def find():
        for r in driver.find_elements(By.CSS_SELECTOR, css):
            if r.get_attribute(attr) == value:
                return r
        return None
    return steady(find)


def queue_row(name):
    return row("#queues tbody tr", "data-queue", name)


def key_row(table, key):
    return row("#%s tbody tr" % table, "data-key", key)


def first_key():
    rows = driver.find_elements(By.CSS_SELECTOR, "#items tbody tr")
    return rows[0].get_attribute("data-key") if rows else None


def number(text):
    return int(text.replace(",", ""))


def click(what, find):
    """Clicks the element find() returns, again if a refresh replaced it."""
    def go():
        e = find()
        if e is None or not e.is_enabled():
            return False
        e.click()
        return True
    wait("click " + what, go)


def accept_confirm(what):
    try:
        WebDriverWait(driver, 5).until(EC.alert_is_present())
    except TimeoutException:
        fail("no confirmation asked before " + what)
    driver.switch_to.alert.accept()


def js_errors():
    return [e for e in driver.get_log("browser") if e.get("source") == "javascript"]


# ------------------------------------------------------------------ the runners settled
# jobs has failed its "bad" key into a dead letter and runs "slow" (an hour).
for base, tok in ((BASE, None), (TBASE, TOKEN)):
    wait("jobs settled on " + base, lambda: (lambda j: (j["processing"], j["waiting"], j["dead"]) == (1, 1, 1))(
        queues(base, tok)["jobs"]))

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
atexit.register(driver.quit)  # also after an unexpected exception
driver.set_page_load_timeout(10)

# ------------------------------------------------------------------ overview
driver.get(BASE + "/")
wait("the overview lists jobs, idle and fast",
     lambda: queue_row("jobs") and queue_row("idle") and queue_row("fast"))
ok("the overview lists every queue")

stable = ("jobs", "idle")  # fast changes all the time


def shown_matches_api():
    qs = queues()
    for name in stable:
        r = queue_row(name)
        for f in ("depth", "processing", "waiting", "dead"):
            if number(cell(r, f)) != qs[name][f]:
                return False
        if cell(r, "paused") != ("paused" if qs[name].get("paused") else "running"):
            return False
    return True


wait("the numbers shown equal GET /queues", shown_matches_api)
qs = queues()
if (qs["jobs"]["processing"], qs["jobs"]["dead"], qs["jobs"]["waiting"]) != (1, 1, 1):
    fail("unexpected jobs state from the Lua script: %s" % qs["jobs"])
ok("depth, processing, waiting, dead and paused equal GET /queues (jobs %d/%d/%d/%d, idle %d)"
   % (qs["jobs"]["depth"], qs["jobs"]["processing"], qs["jobs"]["waiting"], qs["jobs"]["dead"],
      qs["idle"]["depth"]))

status, _ = api("POST", "/queues/idle/items", {"key": ODD, "payload": {"x": "<i>&amp;</i>"}})
if status != 202:
    fail("POST /queues/idle/items: %s" % status)
wait("the overview refreshes itself to idle depth 121",
     lambda: number(cell(queue_row("idle"), "depth")) == 121)
ok("the overview refreshes itself (idle depth 120 -> 121 without a reload)")

def rate_shown():
    t = cell(queue_row("fast"), "rate")
    return t not in ("…", "0") and float(t.replace(",", "")) > 0 and queue_row("fast").find_elements(
        By.CSS_SELECTOR, "svg.spark polyline")
wait("a done/min rate and a sparkline for fast", rate_shown, 8)
ok("fast shows a done/min rate (%s) and a sparkline" % steady(lambda: cell(queue_row("fast"), "rate")))

# A fresh page (no auto refresh: one sample only, no history of its own) shows the
# runner's own count of the last minute at once, not "…".
driver.get(BASE + "/?refresh=0")
wait("the overview after a reload", lambda: queue_row("fast"))
t = cell(queue_row("fast"), "rate")
if t in ("…", "0") or float(t.replace(",", "")) <= 0:
    fail("a freshly loaded page shows Done/min %r for fast (the runner's done_last_minute: %s)"
         % (t, queues()["fast"].get("done_last_minute")))
ok("a freshly loaded page shows fast's Done/min at once (%s), from GET /queues' done_last_minute" % t)
wait("mail's group limits hold 5 items back", lambda: queues()["mail"]["throttled"] == 5)
qs = queues()
held = {n: cell(queue_row(n), "throttled") for n in ("jobs", "idle", "fast", "mail")}
if held != {n: "{:,}".format(qs[n]["throttled"]) for n in ("jobs", "idle", "fast", "mail")} or held["mail"] != "5":
    fail("the Held column %s differs from GET /queues' throttled (mail: 5)" % held)
ok("the Held column shows each queue's throttled count (%s)" % held)
driver.get(BASE + "/")
wait("the overview again", lambda: queue_row("fast"))

external = driver.execute_script(
    "return performance.getEntriesByType('resource').map(e => e.name)"
    ".filter(n => !n.startsWith(location.origin + '/'))")
if external:
    fail("the page loaded external resources: %s" % external)
ok("no resource loaded from anywhere else")
if SHOTS:
    driver.save_screenshot(os.path.join(SHOTS, "dashboard-overview.png"))

# ------------------------------------------------------------------ schedules and held groups
# #/queues/NAME (as the API spells it) is the queue's page too, not the overview
driver.get(BASE + "/#/queues/mail")


def sched_row(name):
    return row("#schedules tbody tr", "data-name", name)


def group_row(name):
    return row("#groups tbody tr", "data-group", name)


wait("the schedules of mail", lambda: sched_row("digest") and sched_row("beat"))
ok("#/queues/mail shows mail's page")
status, api_sched = api("GET", "/queues/mail/schedules")
api_sched = {x["name"]: x for x in api_sched["schedules"]}
digest = steady(lambda: {f: cell(sched_row("digest"), f) for f in ("name", "spec", "key", "next", "last")})
next_at = steady(lambda: sched_row("digest").find_element(By.CSS_SELECTOR, '[data-field="next"]')
                 .get_attribute("data-at"))
# Never run, unless a multiple of 5 minutes came while the test ran (then it ran at it).
fired = time.time() // 300 * 300 >= T0 - 60
if (digest["name"], digest["spec"], digest["key"]) != ("digest", "*/5 * * * *", "daily-digest") \
        or not (digest["last"] == "–" or (fired and digest["last"].endswith(" ago"))):
    fail("the digest schedule shown as %s" % digest)
if float(next_at) != api_sched["digest"]["next_at"] or not 0 < float(next_at) - time.time() <= 300 \
        or float(next_at) % 300 != 0:
    fail("digest's next run is %s (API %s), not the next multiple of 5 minutes" % (next_at, api_sched["digest"]["next_at"]))
if not digest["next"].startswith("in ") or not (digest["next"].endswith(" s") or digest["next"].endswith(" min")):
    fail("digest's next run reads %r" % digest["next"])
ok("the schedules panel shows digest: spec */5 * * * *, key daily-digest, next run %r (%s), last run %r"
   % (digest["next"], next_at, digest["last"]))
beat = wait("beat's last run shown", lambda: (lambda t: t.endswith(" ago") and t)(cell(sched_row("beat"), "last")))
beat_spec = steady(lambda: cell(sched_row("beat"), "spec"))
if beat_spec != "@every 1s":
    fail("beat's spec reads %r" % beat_spec)
ok("the schedules panel shows beat (@every 1s) with a last run (%r)" % beat)

# "Run now" (POST .../schedules/digest/trigger): daily-digest is added at once (its handler then
# runs for an hour), the next run stays where it was.
if any(it["key"] == "daily-digest" for it in all_items("mail")):
    fail("daily-digest is pending before Run now")
click("Run now of digest", lambda: sched_row("digest") and sched_row("digest").find_element(
    By.CSS_SELECTOR, 'button[data-action="trigger"]'))
wait("the notice of Run now", lambda: "Added daily-digest (schedule digest)"
     in driver.find_element(By.ID, "notice").text)
wait("daily-digest pending after Run now", lambda: any(it["key"] == "daily-digest" for it in all_items("mail")))
status, after_sched = api("GET", "/queues/mail/schedules")
after_next = {x["name"]: x for x in after_sched["schedules"]}["digest"]["next_at"]
if after_next != api_sched["digest"]["next_at"]:
    fail("Run now moved digest's next run from %s to %s" % (api_sched["digest"]["next_at"], after_next))
ok("Run now added digest's key at once; its next run stayed at %s" % after_next)

wait("the held groups of mail", lambda: group_row("acme") and group_row("globex"))
status, api_groups = api("GET", "/queues/mail/groups?limit=10")
shown = steady(lambda: [[r.get_attribute("data-group")] + [cell(r, f) for f in ("held", "queued", "running", "limit")]
                        for r in driver.find_elements(By.CSS_SELECTOR, "#groups tbody tr")])
want = [[g["group"], str(g["held"]), str(g["queued"]), str(g["running"]), "1 at a time"] for g in api_groups["groups"]]
if shown != want or shown[0][:4] != ["acme", "4", "4", "1"] or shown[1][:2] != ["globex", "1"]:
    fail("the held groups shown %s, API %s (want acme 4 held, 1 running first)" % (shown, want))
tile = steady(lambda: driver.find_element(By.CSS_SELECTOR, '#q-tiles [data-field="throttled"]').text)
if tile != "5":
    fail("mail's 'held by limits' tile reads %r, not 5" % tile)
ok("the groups panel lists acme (4 held, 1 running, 1 at a time) before globex (1 held), as the API; "
   "the held tile reads 5")
if SHOTS:
    driver.save_screenshot(os.path.join(SHOTS, "dashboard-mail.png"))
driver.get(BASE + "/")
wait("the overview again", lambda: queue_row("jobs"))

# ------------------------------------------------------------------ queue page
click("the jobs link", lambda: queue_row("jobs").find_element(By.LINK_TEXT, "jobs"))
wait("#/queue/jobs", lambda: driver.current_url.endswith("#/queue/jobs"))
wait("the items of jobs", lambda: key_row("items", "slow") and key_row("items", "p5"))
shown = steady(lambda: {r.get_attribute("data-key"): r.text
                        for r in driver.find_elements(By.CSS_SELECTOR, "#items tbody tr")})
api_items = {i["key"]: i["state"] for i in all_items("jobs")}
if set(shown) != set(api_items):
    fail("items shown %s, API %s" % (sorted(shown), sorted(api_items)))
for k, st in api_items.items():
    if st not in shown[k]:
        fail("item %s: state %s not shown in %r" % (k, st, shown[k]))
ok("the jobs page lists the pending items of the API with their states (%s)"
   % ", ".join("%s %s" % kv for kv in sorted(api_items.items())))

FLAKY_ERR = 'flaky: <i>no route</i> & "host"\nsecond line'
flaky = [i for i in all_items("jobs") if i["key"] == "flaky"]
if not flaky or (flaky[0]["attempt"], flaky[0].get("last_error")) != (2, FLAKY_ERR):
    fail("GET /queues/jobs/items: flaky is %s, expected attempt 2 and last_error %r" % (flaky, FLAKY_ERR))
attempt, last, tip = steady(lambda: [key_row("items", "flaky").find_element(By.CSS_SELECTOR, "td.num:nth-of-type(6)").text,
                                     key_row("items", "flaky").find_element(By.CSS_SELECTOR, "td.last-error").text,
                                     key_row("items", "flaky").find_element(By.CSS_SELECTOR, "td.last-error")
                                     .get_attribute("title")])
if (attempt, last, tip) != ("2", FLAKY_ERR.split("\n")[0], FLAKY_ERR):
    fail("flaky shown with attempt %r, last error %r (tooltip %r)" % (attempt, last, tip))
if steady(lambda: key_row("items", "p1").find_element(By.CSS_SELECTOR, "td.last-error").text) != "":
    fail("p1, which never failed, shows a last error")
ok("the item list shows the attempt and the first line of the last error, literally (flaky: 2, %r)" % last)

wait("the dead letter", lambda: key_row("dead", BAD))
dkey, err = steady(lambda: [key_row("dead", BAD).find_element(By.CSS_SELECTOR, "td." + c).text
                            for c in ("key", "err")])
if dkey != BAD:
    fail("dead key shown as %r" % dkey)
if err != 'exploded: <b>bold</b> & "quotes"':
    fail("error shown as %r" % err)
if driver.find_elements(By.CSS_SELECTOR, "#dead b, #dead script, #items i"):
    fail("text from the API became HTML elements")
ok("the dead letter's key and error are shown literally, with no markup")
if SHOTS:
    driver.save_screenshot(os.path.join(SHOTS, "dashboard-queue.png"))

# pause, then resume
click("Pause", lambda: driver.find_element(By.ID, "pause") if driver.find_element(By.ID, "pause").text == "Pause" else None)
wait("GET /queues says jobs is paused", lambda: queues()["jobs"].get("paused") in (True, 1))
wait("the page shows paused and offers Resume", lambda: driver.find_element(By.ID, "pause").text == "Resume"
     and "paused" in driver.find_element(By.TAG_NAME, "h1").text)
ok("Pause pauses the queue (GET /queues: paused) and the page shows it")
click("Resume", lambda: driver.find_element(By.ID, "pause") if driver.find_element(By.ID, "pause").text == "Resume" else None)
wait("GET /queues says jobs runs", lambda: queues()["jobs"].get("paused") in (False, 0))
ok("Resume resumes it")

# retry the dead letter: the worker is busy with "slow", so it stays queued
click("Retry", lambda: key_row("dead", BAD).find_element(By.CSS_SELECTOR, '[data-action="retry"]'))
wait("the dead letter re-queued",
     lambda: not any(d["key"] == BAD for d in dead("jobs"))
     and any(i["key"] == BAD and i["state"] == "queued" for i in all_items("jobs")))
wait("the page shows it queued and no dead letter",
     lambda: key_row("items", BAD) and not key_row("dead", BAD)
     and number(driver.find_element(By.CSS_SELECTOR, '#q-tiles [data-field="dead"]').text) == 0)
ok("Retry re-queues the dead letter (API: not dead, queued; key with <&\"'/% ü)")

# paging: idle holds k001..k120 and ODD, 50 a page: k120 is on page 3
driver.get(BASE + "/#/queue/idle")
wait("the items of idle", lambda: key_row("items", "k001") or key_row("items", ODD))


def page_to(key):
    """Clicks Next until key is shown; the number of clicks."""
    for n in range(6):
        if key_row("items", key):
            return n
        first = steady(first_key)
        click("Next", lambda: driver.find_element(By.ID, "next-page"))
        wait("the next page", lambda: first_key() not in (None, first))
    fail("%r not found paging through idle" % key)


n = page_to("k120")
shown = steady(lambda: len(driver.find_elements(By.CSS_SELECTOR, "#items tbody tr")))
if n != 2 or shown != 21 or not steady(lambda: driver.find_element(By.ID, "next-page").get_attribute("disabled")):
    fail("k120 after %d clicks on Next, %d rows on its page (want 2 and 21, Next disabled)" % (n, shown))
ok("paging through the 121 items of idle: 50, 50, 21, then Next is disabled")
click("First", lambda: driver.find_element(By.ID, "first-page"))
wait("the first page", lambda: driver.find_element(By.ID, "first-page").get_attribute("disabled"))
page_to(ODD)

# remove: the odd key of idle
okey = steady(lambda: key_row("items", ODD).find_element(By.CSS_SELECTOR, "td.key").text)
if okey != ODD:
    fail("odd key shown as %r" % okey)
click("Remove", lambda: key_row("items", ODD).find_element(By.CSS_SELECTOR, '[data-action="remove"]'))
accept_confirm("remove")
wait("the odd key removed", lambda: queues()["idle"]["depth"] == 120
     and not any(i["key"] == ODD for i in all_items("idle")))
ok("Remove (after a confirmation) removes the key through a percent-encoded path")

# an action that fails is shown: remove a key the API removed meanwhile (no auto refresh)
driver.get(BASE + "/?refresh=0#/queue/idle")
wait("k001 shown", lambda: key_row("items", "k001"))
status, body = api("DELETE", "/queues/idle/items/k001")
if status // 100 != 2:
    fail("DELETE /queues/idle/items/k001: %s %s" % (status, body))
click("Remove k001", lambda: key_row("items", "k001").find_element(By.CSS_SELECTOR, '[data-action="remove"]'))
accept_confirm("remove k001")
msg = wait("an error message", lambda: driver.find_element(By.ID, "error").text)
if "remove k001" not in msg or "404" not in msg:
    fail("error shown as %r" % msg)
ok("a failed action is shown: %r" % msg.replace("\n×", ""))

# cancel the processing key
driver.get(BASE + "/#/queue/jobs")
click("Cancel", lambda: key_row("items", "slow").find_element(By.CSS_SELECTOR, '[data-action="cancel"]'))
accept_confirm("cancel")
wait("slow cancelled: not pending, not dead",
     lambda: not any(i["key"] == "slow" for i in all_items("jobs"))
     and not any(d["key"] == "slow" for d in dead("jobs")), 8)
ok("Cancel stops the processing key (API: neither pending nor dead)")

errs = js_errors()
if errs:
    fail("JavaScript errors: %s" % errs)
ok("no JavaScript error")

# ------------------------------------------------------------------ phone width
driver.set_window_size(420, 860)
driver.get(BASE + "/")
wait("the overview at phone width", lambda: queue_row("jobs"))
wide = driver.execute_script("return document.documentElement.scrollWidth > window.innerWidth + 1")
if wide:
    fail("the overview scrolls sideways at %dpx" % driver.execute_script("return window.innerWidth"))
ok("the overview fits a phone's width without scrolling sideways")
if SHOTS:
    driver.save_screenshot(os.path.join(SHOTS, "dashboard-phone.png"))
driver.get(BASE + "/#/queue/mail")
wait("mail's groups and schedules at phone width", lambda: group_row("acme") and sched_row("digest"))
if driver.execute_script("return document.documentElement.scrollWidth > window.innerWidth + 1"):
    fail("mail's page (groups, schedules) scrolls sideways at %dpx" % driver.execute_script("return window.innerWidth"))
ok("a queue's groups and schedules fit a phone's width too")
driver.set_window_size(1280, 900)

# ------------------------------------------------------------------ recent runs (the history)
driver.get(BASE + "/#/queue/fast")


def history_now():
    """The recent runs shown, read in one go (a refresh may replace the table between reads)."""
    return driver.execute_script("return Array.from(document.querySelectorAll('#history tbody tr'))"
                                 ".map(r => [r.dataset.key, r.dataset.state])")


def history_good():
    """The runs shown when they are what they should be: done, newest first, at most 20, among
    the newest the API lists (the page and the API read at different moments); else None."""
    shown = history_now()
    # until the page has drawn fast's table, the table shown may still be the last page's
    if not shown or any(not re.fullmatch(r"f\d+", k) for k, _ in shown):
        return None
    if len(shown) > 20 or any(st != "done" for _, st in shown):
        return None
    nums = [int(k[1:]) for k, _ in shown]
    if nums != sorted(nums, reverse=True):
        return None
    status, api_hist = api("GET", "/queues/fast/history?limit=20")
    api_keys = [r["key"] for r in api_hist["history"]]
    return shown if set(k for k, _ in shown[:5]) & set(api_keys[:25]) else None


shown = wait("fast's recent runs: done, newest first, as the API lists them", history_good, 15)
ok("a queue's page lists its recent runs, newest first (%d shown, newest %s)" % (len(shown), shown[0][0]))
driver.get(BASE + "/#/queue/idle")
wait("idle's history: k001, removed above with the Remove button",
     lambda: ["k001", "removed"] in history_now(), 15)
ok("an item removed from the page is in its queue's recent runs as removed")

# ------------------------------------------------------------------ --token
driver.get(TBASE + "/")
wait("the token prompt", lambda: driver.find_element(By.ID, "auth").is_displayed())
ok("with --token the page loads and asks for the token")
driver.find_element(By.ID, "auth-token").send_keys("wrong")
driver.find_element(By.CSS_SELECTOR, "#auth-form button").click()
wait("the prompt again, saying the token was refused",
     lambda: driver.find_element(By.ID, "auth").is_displayed()
     and "refused" in driver.find_element(By.ID, "auth-msg").text)
ok("a wrong token is refused and asked again")
driver.find_element(By.ID, "auth-token").send_keys(TOKEN)
driver.find_element(By.CSS_SELECTOR, "#auth-form button").click()
wait("the overview with the token", lambda: queue_row("jobs") and not driver.find_element(By.ID, "auth").is_displayed())
if driver.execute_script("return sessionStorage.getItem('wqrun.token')") != TOKEN:
    fail("the token is not kept in sessionStorage")
if driver.execute_script("return localStorage.length") != 0:
    fail("something was written to localStorage")
ok("the right token shows the queues; kept in sessionStorage only")
driver.refresh()
wait("the overview after a reload", lambda: queue_row("jobs"))
if driver.find_element(By.ID, "auth").is_displayed():
    fail("asked for the token again after a reload")
ok("a reload in the same tab does not ask again")
click("the jobs link", lambda: queue_row("jobs").find_element(By.LINK_TEXT, "jobs"))
click("Pause", lambda: driver.find_element(By.ID, "pause") if driver.find_element(By.ID, "pause").text == "Pause" else None)
wait("jobs paused on the token runner",
     lambda: queues(TBASE, TOKEN)["jobs"].get("paused") in (True, 1))
ok("actions send the token (Pause worked on the --token runner)")

# The event stream sends it too (read with fetch, which EventSource could not): with the page's
# own refresh a minute apart, a resume made through the API shows within 2 s.
driver.get(TBASE + "/?refresh=60#/queue/jobs")
wait("the event stream open on the --token runner",
     lambda: driver.execute_script("return document.documentElement.dataset.events") == "open"
     and driver.find_element(By.ID, "pause").text == "Resume")
t0 = time.time()
status, body = api("POST", "/queues/jobs/resume", token=TOKEN, base=TBASE)
if status != 200:
    fail("POST /queues/jobs/resume on the --token runner: %s %s" % (status, body))
wait("the resume shown from the event stream", lambda: driver.find_element(By.ID, "pause").text == "Pause", 2)
ok("the event stream carries the token: a resume through the API shown after %.2f s (?refresh=60)"
   % (time.time() - t0))

errs = js_errors()
if errs:
    fail("JavaScript errors: %s" % errs)
print("dashboard.py: %d checks passed" % checks)
