#!/usr/bin/python3
"""Flows on the dashboard (GET /), in a real headless Chromium driven by Selenium.

Run by tests/e2e/test_dashboard_flows.sh against a runner of
tests/e2e/lua/dash_flows.lua (on a state file, then on PostgreSQL). Posts
flows through the API, then checks the page against it: the overview's
flows table (states and counts), a flow's page with its nodes by state
(blocked with what they wait for, pending, done with results, dead with
errors), the cancel button (its effect shown within 500 ms of the
answer), an unknown flow, and that no JavaScript error happened.
Prints one line per check; exits 1 on the first failure.

usage: dashboard_flows.py BASE
"""
import atexit
import json
import os
import sys
import time
import urllib.error
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import (NoSuchElementException, StaleElementReferenceException,
                                        WebDriverException)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from live_page import steady

BASE = sys.argv[1]
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
        except WebDriverException:
            pass
    sys.exit(1)


def ok(msg):
    global checks
    checks += 1
    print("ok - " + msg)


def api(method, path, body=None):
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


def wait(what, cond, timeout=6.0):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            v = cond()
            if v:
                return v
        except (StaleElementReferenceException, NoSuchElementException, AttributeError) as e:
            last = e
        time.sleep(0.05)
    fail("timed out waiting for: %s%s" % (what, " (%s)" % type(last).__name__ if last else ""))


def flow(fid):
    status, f = api("GET", "/flows/" + fid)
    if status != 200:
        fail("GET /flows/%s: %s %s" % (fid, status, f))
    return f


# ------------------------------------------------------------------ two flows
# "done": three parts into a join, all run at once; "held": two slow parts (their handlers
# wait an hour) into a join that stays blocked, and a tail behind the join.
parts = [{"queue": "parts", "key": "dp%d" % i, "payload": {"n": i}} for i in range(1, 4)]
after = [{"queue": "parts", "key": "dp%d" % i} for i in range(1, 4)]
st, r = api("POST", "/flows", {"id": "done-flow", "nodes": parts + [
    {"queue": "joins", "key": "dj", "after": after}]})
if st != 202 or r.get("id") != "done-flow":
    fail("POST /flows done-flow: %s %s" % (st, r))
st, r = api("POST", "/flows", {"id": "held flow <&>", "nodes": [
    {"queue": "slow", "key": "s1"}, {"queue": "slow", "key": "s2"},
    {"queue": "joins", "key": "hj", "after": [{"queue": "slow", "key": "s1"}, {"queue": "slow", "key": "s2"}]},
    {"queue": "joins", "key": "tail", "after": [{"queue": "joins", "key": "hj"}]}]})
if st != 202:
    fail("POST /flows held: %s %s" % (st, r))
HELD = "held flow <&>"
HELD_PATH = urllib.request.quote(HELD, safe="")
wait("done-flow finished", lambda: flow("done-flow").get("finished_at"))
wait("the slow parts run", lambda: (lambda f: [n["state"] for n in f["nodes"]].count("pending") == 2)(
    flow(HELD_PATH)))
ok("two flows: one finished, one held by running parts")

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


def flow_row(fid):
    for tr in driver.find_elements(By.CSS_SELECTOR, "#flows tbody tr"):
        if tr.get_attribute("data-flow") == fid:
            return tr
    return None


def field(el, name):
    return el.find_element(By.CSS_SELECTOR, '[data-field="%s"]' % name).text.strip()


driver.get(BASE + "/")
wait("the overview lists both flows", lambda: flow_row("done-flow") and flow_row(HELD))
seen = {}


def row_as_api(fid):
    """Whether fid's row shows the API's counts and state (the live page may redraw the row
    while it is read: wait() then reads it again)."""
    f = flow(urllib.request.quote(fid, safe=""))
    row = flow_row(fid)
    kinds = ("blocked", "pending", "done", "dead")
    shown = [field(row, k) for k in kinds] + [field(row, "flow-state")]
    want = [str(sum(1 for n in f["nodes"] if n["state"] == k)) for k in kinds] + [
        "finished" if fid == "done-flow" else "running"]
    seen[fid] = (shown, want)
    return shown == want


for fid in ("done-flow", HELD):
    try:
        wait("the overview row of %s as the API says" % fid, lambda: row_as_api(fid), timeout=3)
    except SystemExit:
        print("# overview row of %s shows %s, the API says %s" % ((fid,) + seen.get(fid, (None, None))))
        raise
ok("the overview's flows table shows each flow's state and counts per state as the API does")

# ------------------------------------------------------------------ a finished flow's page
# (the overview is redrawn at its refreshes: the link is found again if it was replaced)
wait("a click on done-flow's link", lambda: flow_row("done-flow").find_element(By.CSS_SELECTOR, "a").click() or True)
wait("the flow page of done-flow", lambda: driver.find_element(By.ID, "flow-id").text == "done-flow")
wait("its done nodes", lambda: len(driver.find_elements(By.CSS_SELECTOR, "#nodes-done tbody tr")) == 4)
if driver.find_elements(By.ID, "cancel-flow"):
    fail("a finished flow offers a cancel button")
join = steady(lambda: driver.find_element(By.CSS_SELECTOR, '#nodes-done tr[data-node="joins/dj"]').text)
if '"sum":6' not in join.replace(" ", ""):
    fail("the join's result is not shown: %r" % join)
if "parts/dp1, parts/dp2, parts/dp3" not in join:
    fail("the join's dependencies are not shown in order: %r" % join)
ok("a finished flow's page: every node done, the join's result and its dependencies in order")

# ------------------------------------------------------------------ a held flow, cancelled
driver.get(BASE + "/#/flow/" + HELD_PATH)
wait("the flow page of the held flow", lambda: driver.find_element(By.ID, "flow-id").text == HELD)
why = {}


def held_page():
    """Whether the held flow's page shows its blocked and pending nodes (read again when the
    live page redraws meanwhile)."""
    blocked = sorted(tr.get_attribute("data-node")
                     for tr in driver.find_elements(By.CSS_SELECTOR, "#nodes-blocked tbody tr"))
    hj = driver.find_element(By.CSS_SELECTOR, '#nodes-blocked tr[data-node="joins/hj"]').text
    pending = sorted(tr.get_attribute("data-node")
                     for tr in driver.find_elements(By.CSS_SELECTOR, "#nodes-pending tbody tr"))
    tiles = (field(driver, "nodes-blocked"), field(driver, "nodes-pending"))
    why["held"] = "blocked %s, the join says %r, pending %s, tiles %s" % (blocked, hj, pending, tiles)
    return (blocked == ["joins/hj", "joins/tail"] and "2 left" in hj and "slow/s1, slow/s2" in hj
            and pending == ["slow/s1", "slow/s2"] and tiles == ("2", "2"))


try:
    wait("the held flow's blocked and pending nodes", held_page, timeout=4)
except SystemExit:
    print("# shown: %s" % why.get("held"))
    raise
ok("a held flow's page: blocked nodes with what they wait for, the running parts pending")

wait("a click on the cancel button", lambda: driver.find_element(By.ID, "cancel-flow").click() or True)
t0 = time.time()
wait("every node of the cancelled flow dead", lambda: field(driver, "nodes-dead") == "4", timeout=5)
shown_after = time.time() - t0
f = flow(HELD_PATH)
if not f["cancelled"] or any(n["state"] != "dead" for n in f["nodes"]):
    fail("the API does not show the flow cancelled: %s" % f)
wait("every dead node says why", lambda: all(
    "cancelled" in tr.text for tr in driver.find_elements(By.CSS_SELECTOR, "#nodes-dead tbody tr")),
    timeout=3)
if steady(lambda: field(driver, "flow-state")) != "cancelled" or driver.find_elements(By.ID, "cancel-flow"):
    fail("the page still offers to cancel a cancelled flow")
if shown_after > 2.0:
    fail("the cancel showed after %.2f s" % shown_after)
ok("the cancel button cancels the flow; its dead nodes say why, shown %.0f ms after the click"
   % (shown_after * 1000))

# ------------------------------------------------------------------ unknown flow, errors
driver.get(BASE + "/#/flow/nope")
wait("an unknown flow is said so", lambda: "No flow named" in driver.find_element(By.ID, "view").text)
ok("an unknown flow's page says there is none")
errors = [e for e in driver.get_log("browser") if e.get("source") == "javascript"]
if errors:
    fail("JavaScript errors: %s" % errors)
ok("no JavaScript error")
print("%d checks passed" % checks)
