#!/usr/bin/python3
"""The dashboard of a runner sharing a PostgreSQL database, in headless Chromium.

Run by tests/e2e/test_pg_dashboard.sh with BASE (runner dash-a's --listen),
the database URL and the name of the other runner (dash-b). Checks that the
overview shows the database's numbers (compared with psql), lists both
runners with their heartbeats and running items (compared with GET /runners
and psql), shows a jobs/s for the runner that runs the feed, a queue's
schedules and most held groups as the database has them, that a
pause clicked on dash-a's page pauses the queue for every runner, and that
the queue's recent runs are the database's history (compared with psql).
Prints one line per check; exits 1 on the first failure.

usage: dashboard_pg.py BASE DATABASE_URL OTHER_RUNNER
"""
import atexit
import json
import os
import subprocess
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

BASE, DB, OTHER = sys.argv[1], sys.argv[2], sys.argv[3]
sys.stdout.reconfigure(line_buffering=True)
driver = None
checks = 0


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    if driver is not None:
        try:
            print("     text: " + driver.find_element(By.TAG_NAME, "body").text[:1500]
                  .replace("\n", "\n           "), file=sys.stderr)
        except WebDriverException:
            pass
    sys.exit(1)


def ok(msg):
    global checks
    checks += 1
    print("ok - " + msg)


def psql(sql):
    pgbin = os.environ.get("WQ_PG_BIN", "/usr/lib/postgresql/15/bin")
    return subprocess.run([pgbin + "/psql", "-qXAt", "-v", "ON_ERROR_STOP=1", DB, "-c", sql],
                          check=True, capture_output=True, text=True).stdout.strip()


def api(path):
    with urllib.request.urlopen(BASE + path, timeout=5) as r:
        return json.loads(r.read().decode())


def wait(what, cond, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            v = cond()
            if v:
                return v
        except (StaleElementReferenceException, NoSuchElementException, AttributeError, KeyError):
            pass
        time.sleep(0.1)
    fail("timed out waiting for: " + what)


def cell(css_row, field):
    # the live page redraws a table when an event comes: an element found may be replaced
    # before it is read, so the read is tried again on a fresh one
    return steady(lambda: driver.find_element(
        By.CSS_SELECTOR, css_row + ' [data-field="%s"]' % field).text.strip(), 50, 0.02)


opts = webdriver.ChromeOptions()
opts.binary_location = os.environ.get("CHROMIUM", "/usr/bin/chromium")
for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
          "--disable-extensions", "--no-first-run", "--window-size=1280,900"):
    opts.add_argument(a)
try:
    driver = webdriver.Chrome(service=Service(os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")),
                              options=opts)
except WebDriverException as e:
    driver = None
    fail("cannot start headless chromium: %s" % e.msg)
atexit.register(driver.quit)
driver.set_page_load_timeout(10)
driver.get(BASE + "/")

# The database's numbers, not this runner's: idle has 30 items no runner claims; w's two slow
# items run on whichever runners claimed them.
wait("the overview shows idle's 30 queued items",
     lambda: cell('tr[data-queue="idle"]', "depth") == psql("select count(*) from wqrun.jobs where queue = 'idle'") == "30")
ok("idle's depth is the database's (30)")
wait("w's processing count is the database's",
     lambda: cell('tr[data-queue="w"]', "processing") ==
     psql("select count(*) from wqrun.jobs where queue = 'w' and running"))
ok("w's processing count matches psql (every runner's running items)")
wait("w's dead count is the database's (3)",
     lambda: cell('tr[data-queue="w"]', "dead") == psql("select count(*) from wqrun.dead where queue = 'w'") == "3")
ok("w's dead count matches psql (3)")

# The runners.
def runner_rows():
    return {r.get_attribute("data-runner"): r for r in driver.find_elements(By.CSS_SELECTOR, "#runners tbody tr")}

wait("both runners are listed", lambda: {"dash-a", OTHER} <= set(runner_rows()))
ok("the runners view lists dash-a and " + OTHER)
wait("dash-a is marked as this runner", lambda: "(this one)" in cell('tr[data-runner="dash-a"]', "name"))
ok("dash-a is marked (this one)")
slow_db = dict(r.split("|") for r in psql(
    "select r.name, count(j.key) from wqrun.runners r left join wqrun.jobs j "
    "on j.runner = r.id and j.running and j.key like 'slow%' group by r.name").splitlines())
ok("psql says the slow items run on: %s" % slow_db)
for name in ("dash-a", OTHER):
    wait("%s's running count is the database's" % name,
         lambda: int(cell('tr[data-runner="%s"]' % name, "running")) >= int(slow_db.get(name, "0")))
    hb = cell('tr[data-runner="%s"]' % name, "heartbeat")
    if not hb.endswith("s ago") or float(hb.split()[0]) > 3:
        fail("%s's heartbeat reads %r" % (name, hb))
ok("both runners: a running count and a heartbeat under 3 s")
api_runners = {r["name"]: r for r in api("/runners")["runners"]}
if set(api_runners) != {"dash-a", OTHER} or not api_runners["dash-a"]["self"]:
    fail("GET /runners: %s" % api_runners)
ok("GET /runners agrees: two runners, dash-a is self")
feeder = wait("a jobs/s shows for the runners that run the feed",
              lambda: [n for n in ("dash-a", OTHER)
                       if cell('tr[data-runner="%s"]' % n, "rate") not in ("…", "0.0")])
ok("jobs/s shown for %s (%s)" % (feeder, [cell('tr[data-runner="%s"]' % n, "rate") for n in feeder]))

# A queue's schedules and most held groups: the database's.
driver.get(BASE + "/#/queue/mail")


def rows(table, attr):
    return {r.get_attribute(attr): r for r in driver.find_elements(By.CSS_SELECTOR, "#%s tbody tr" % table)}


wait("mail's schedules", lambda: {"digest", "beat"} <= set(rows("schedules", "data-name")))
digest = {f: cell('#schedules tr[data-name="digest"]', f) for f in ("spec", "key", "next")}
at = steady(lambda: driver.find_element(
    By.CSS_SELECTOR, '#schedules tr[data-name="digest"] [data-field="next"]').get_attribute("data-at"), 50, 0.02)
db_next = psql("select extract(epoch from next_at)::bigint from wqrun.schedules where queue = 'mail' and name = 'digest'")
if (digest["spec"], digest["key"]) != ("*/5 * * * *", "daily-digest") or not digest["next"].startswith("in ") \
        or int(float(at)) != int(db_next) or not 0 < float(at) - time.time() <= 300:
    fail("digest shown as %s (next at %s), the database says next_at %s" % (digest, at, db_next))
ok("the schedules panel shows digest from the database: */5 * * * *, key daily-digest, next run %r" % digest["next"])
wait("orphan, which no runner defines, marked so",
     lambda: "(not defined here)" in cell('#schedules tr[data-name="orphan"]', "name")
     and cell('#schedules tr[data-name="orphan"]', "next") == "never")
ok("a schedule in the table that no runner's script defines is listed as '(not defined here)', next run 'never'")
wait("beat's last run (fired by either runner)",
     lambda: cell('#schedules tr[data-name="beat"]', "last").endswith(" ago"))
ok("beat (@every 1s) shows a last run: %r" % cell('#schedules tr[data-name="beat"]', "last"))

db_groups = dict(r.split("|") for r in psql(
    "select grp, count(*) from wqrun.jobs where queue = 'mail' and held group by grp").splitlines())
runs_acme = psql("select r.name from wqrun.jobs j join wqrun.runners r on r.id = j.runner "
                 "where j.queue = 'mail' and j.grp = 'acme' and j.running")
wait("the held groups of mail", lambda: ["acme", "globex"] == list(rows("groups", "data-group")))
shown = {g: [cell('#groups tr[data-group="%s"]' % g, f) for f in ("held", "running", "limit")]
         for g in ("acme", "globex")}
if shown != {"acme": [db_groups.get("acme"), "1", "1 at a time"], "globex": [db_groups.get("globex"), "1", "1 at a time"]} \
        or db_groups != {"acme": "4", "globex": "1"}:
    fail("groups shown %s; psql says held %s" % (shown, db_groups))
ok("the groups panel shows acme (4 held, 1 running on %s) before globex (1 held), as psql says" % runs_acme)
wait("mail's held tile reads 5 (the database's)",
     lambda: driver.find_element(By.CSS_SELECTOR, '#q-tiles [data-field="throttled"]').text == "5")
ok("mail's 'held by limits' tile reads the database's 5")

# A pause clicked here pauses the queue for every runner.
driver.get(BASE + "/#/queue/w")


def click_pause():
    # w's own button: until the page has drawn w's head, mail's may still be shown (a refresh
    # begun before the # changed); a head redrawn meanwhile makes the click raise, not land
    btn = driver.find_element(By.ID, "pause")
    if driver.find_element(By.CSS_SELECTOR, "#q-head h1 .key").text != "w" or btn.text.strip().lower() != "pause":
        return False
    btn.click()
    return True


wait("a click on w's pause button", click_pause)
wait("the database says w is paused", lambda: psql("select paused from wqrun.queues where name = 'w'") == "t")
ok("the pause button paused w in the database")
before = psql("select count(*) from wqrun.jobs where queue = 'w' and key like 'f%' and running")
time.sleep(1.5)
started = psql("select count(*) from wqrun.jobs where queue = 'w' and key like 'f%' and running")
if started != "0":
    fail("feed items still start 1.5 s after the pause (%s running, %s before)" % (started, before))
ok("no feed item runs on any runner 1.5 s after the pause")

# Recent runs: the database's history (every runner's runs), newest first, as psql lists it; a
# cancel made through the API is in it at the top. The feed is paused: the history stands still.
req = urllib.request.Request(BASE + "/queues/w/items/slow1/cancel", data=b"", method="POST")
with urllib.request.urlopen(req, timeout=5) as r:
    if json.loads(r.read().decode()) != {"cancelled": True}:
        fail("POST /queues/w/items/slow1/cancel did not cancel it")
wait("slow1's cancelled run in the database's history",
     lambda: psql("select state from wqrun.history where queue = 'w' and key = 'slow1'") == "cancelled")


def history_shown():
    """The recent runs shown: key, state, attempts, error or result (read in one go)."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('#history tbody tr')).map((r) => [r.dataset.key,"
        " r.dataset.state, r.querySelector('[data-label=\"Attempts\"]').textContent,"
        " r.querySelector('[data-label=\"Error or result\"]').textContent])")


db_hist = [r.split("|") for r in psql(
    "select key, state, attempts, coalesce(error, '') from wqrun.history where queue = 'w' "
    "order by id desc limit 20").splitlines()]
if len(db_hist) != 20 or db_hist[0] != ["slow1", "cancelled", "1", "cancelled"] \
        or any(k[0] != "f" or st != "done" or n != "1" or e for k, st, n, e in db_hist[1:]):
    fail("psql's newest runs of w: %s" % db_hist)
wait("w's recent runs on the page as psql lists them", lambda: history_shown() == db_hist, 15)
runners = psql("select string_agg(distinct coalesce(runner, '-'), ',') from (select runner from "
               "wqrun.history where queue = 'w' order by id desc limit 20) x")
ok("w's page lists its 20 recent runs as the database has them, newest first: slow1 cancelled "
   "(1 attempt, error cancelled), then the feed's done runs (run by %s)" % runners)
print("dashboard_pg: %d checks passed" % checks)
