#!/usr/bin/env python3
"""The remote-worker protocol (SPEC 10.2) checked over real HTTP against a
runner serving tests/e2e/test_remote.sh's script: bad input, claims and long
polls, exclusivity and the follow-up rule, group limits, pause, retries and
dead letters, cancel told at the heartbeat, a lease that runs out (handed out
again, the old token refused with 409), keep_done, batched reports, claims
that carry the reports of the batch before.
Usage: remote_check.py BASE_URL. Prints one line per failed check; exits 1
if any failed."""
import json
import sys
import threading
import time
import urllib.error
import urllib.request

BASE = sys.argv[1]
failed = 0
checks = 0


def call(method, path, body=None, timeout=30):
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(BASE + path, data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        text = e.read()
        try:
            return e.code, json.loads(text)
        except ValueError:
            return e.code, text.decode()


def check(cond, what, got=None):
    global failed, checks
    checks += 1
    if not cond:
        failed += 1
        print("FAIL %s%s" % (what, "" if got is None else " (got %r)" % (got,)))


def add(q, key, payload=None):
    body = {"key": key}
    if payload is not None:
        body["payload"] = payload
    return call("POST", "/queues/%s/items" % q, body)


def claim(q, **kw):
    return call("POST", "/queues/%s/claim" % q, kw)


def report(q, key, kind, **kw):
    return call("POST", "/queues/%s/items/%s/%s" % (q, key, kind), kw)


def claim_one(q, wait=5, **kw):
    code, items = claim(q, max=1, wait=wait, **kw)
    return items[0] if code == 200 and items else None


# ---- bad input: 4xx naming the field, nothing changed ----
for body, field in [({"max": 0}, "'max'"), ({"max": 1.5}, "'max'"), ({"max": 1001}, "'max'"),
                    ({"lease": 0}, "'lease'"), ({"lease": 1e9}, "'lease'"),
                    ({"wait": -1}, "'wait'"), ({"wait": "x"}, "'wait'"),
                    ({"nax": 1}, "'nax'")]:
    code, ans = claim("r", **body)
    check(code == 400 and field in ans.get("error", ""), "claim %r: 400 naming %s" % (body, field),
          (code, ans))
code, ans = call("POST", "/queues/r/claim", b"{nope")
check(code == 400 and "not JSON" in ans["error"], "a claim that is not JSON: 400", (code, ans))
code, ans = call("GET", "/queues/r/claim")
check(code == 405, "GET claim: 405", code)
code, ans = claim("nosuch")
check(code == 404, "a claim on an unknown queue: 404", code)
code, ans = report("r", "k", "done")
check(code == 400 and "'token'" in ans["error"], "a report without its token: 400", (code, ans))
code, ans = report("r", "never", "done", token="0123")
check(code == 404 and "no claim of 'never'" in ans["error"], "a report for a key not claimed: 404",
      (code, ans))
code, ans = report("r", "k", "fail", token="x", retry_in=-1)
check(code == 400 and "'retry_in'" in ans["error"], "retry_in < 0: 400", (code, ans))
code, ans = call("POST", "/queues/r/done", {"key": "k"})
check(code == 400 and "array" in ans["error"], "a batch that is not an array: 400", (code, ans))

# ---- a claim, its result ----
add("r", "k1", {"n": 1})
it = claim_one("r")
check(it and it["key"] == "k1" and it["payload"] == {"n": 1} and it["attempt"] == 1
      and len(it["token"]) == 24 and it["lease_until"] > time.time(), "a claim: key, payload, attempt, token, lease_until", it)
code, ans = report("r", "k1", "done", token=it["token"], result={"sum": 3})
check((code, ans) == (200, {"ok": True}), "done: 200 once committed", (code, ans))
code, ans = call("GET", "/queues/r/items/k1")
check(code == 200 and ans["state"] == "done" and ans["result"] == {"sum": 3}, "its result is kept", ans)
code, ans = report("r", "k1", "done", token=it["token"])
check(code == 409, "a second report with the same token: 409 (the claim ended)", code)

# ---- exclusivity and the follow-up rule ----
add("r", "k2", "v1")
it = claim_one("r")
add("r", "k2", "v2")
code, none = claim("r", max=10, wait=0.3)
check(code == 200 and none == [], "a key being worked on is not handed out twice", none)
report("r", "k2", "done", token=it["token"])
it2 = claim_one("r")
check(it2 and it2["key"] == "k2" and it2["payload"] == "v2", "re-added while claimed: once more after, with the new payload", it2)
report("r", "k2", "done", token=it2["token"])

# ---- group limits: one at a time per group ----
for k in ["a1", "a2", "b1"]:
    add("g", k)
code, items = claim("g", max=10, wait=2)
keys = sorted(i["key"] for i in items)
check(len(keys) == 2 and keys[1] == "b1", "group limit 1: one item of each group", keys)
for i in items:
    report("g", i["key"], "done", token=i["token"])
rest = claim_one("g")
check(rest and rest["key"] in ("a1", "a2") and rest["key"] not in keys, "the group's next once the first is done", rest)
report("g", rest["key"], "done", token=rest["token"])

# two workers claiming at once: still one item of a group at a time
for k in ["a3", "a4", "a5"]:
    add("g", k)
claims = [None, None]


def worker_claim(i):
    claims[i] = claim("g", max=5, wait=1)[1]


ts = [threading.Thread(target=worker_claim, args=(i,)) for i in range(2)]
for th in ts:
    th.start()
for th in ts:
    th.join()
both = [it["key"] for c in claims for it in (c or [])]
check(len(both) == 1 and both[0] in ("a3", "a4", "a5"), "two workers at once: one item of the group between them", claims)
for c in claims:
    for i in c or []:
        report("g", i["key"], "done", token=i["token"])
for _ in range(2):
    it = claim_one("g", wait=2)
    check(it is not None, "the group's others, one after the other", it)
    if it:
        report("g", it["key"], "done", token=it["token"])

# ---- pause ----
call("POST", "/queues/r/pause")
add("r", "k3")
code, none = claim("r", wait=0.3)
check(none == [], "a paused queue hands out nothing", none)
got = {}
t = threading.Thread(target=lambda: got.update(it=claim_one("r", wait=10)))
t.start()
time.sleep(0.2)
t0 = time.time()
call("POST", "/queues/r/resume")
t.join()
check(got.get("it") and got["it"]["key"] == "k3" and time.time() - t0 < 2,
      "a waiting claim gets it at the resume", got)
report("r", "k3", "done", token=got["it"]["token"])

# ---- a long poll answered by the add ----
t = threading.Thread(target=lambda: got.update(lp=claim_one("r", wait=10)))
t.start()
time.sleep(0.3)
t0 = time.time()
add("r", "k4")
t.join()
took = time.time() - t0
check(got.get("lp") and got["lp"]["key"] == "k4" and took < 1, "a long poll answered at the add (%.3f s)" % took, got)
report("r", "k4", "done", token=got["lp"]["token"])

# ---- retries and dead letters ----
add("r", "bad", {"x": 1})
it = claim_one("r")
code, ans = report("r", "bad", "fail", token=it["token"], error="boom", retry_in=0.2)
check((code, ans) == (200, {"ok": True}), "fail: 200", (code, ans))
it = claim_one("r")
check(it and it["key"] == "bad" and it["attempt"] == 2, "retried after retry_in, attempt 2", it)
report("r", "bad", "fail", token=it["token"], error="boom again")
code, dead = call("GET", "/queues/r/dead")
d = [x for x in dead["dead"] if x["key"] == "bad"]
check(d and d[0]["error"] == "boom again" and d[0]["attempts"] == 2 and d[0]["payload"] == {"x": 1},
      "out of retries (max_retries = 1): dead-lettered with its error, attempts and payload", d)
add("r", "perm")
it = claim_one("r")
report("r", "perm", "fail", token=it["token"], error="no such file", permanent=True)
code, ans = call("GET", "/queues/r/items/perm")
check(ans.get("state") == "dead" and ans.get("attempts") == 1, "permanent: dead at once", ans)

# ---- cancel: told at the heartbeat, ended by the report ----
add("r", "c1")
it = claim_one("r")
res = {}
t = threading.Thread(target=lambda: res.update(c=call("POST", "/queues/r/items/c1/cancel")))
t.start()
time.sleep(0.3)
code, hb = report("r", "c1", "heartbeat", token=it["token"])
check(code == 200 and hb["cancelled"] is True and hb["lease_until"] > time.time(), "the heartbeat tells of the cancel", hb)
report("r", "c1", "done", token=it["token"])
t.join()
# (on a state file once the run ended: 200; on PostgreSQL once the runner holding it is told: 202)
check(res.get("c") in ((200, {"cancelled": True}), (202, {"cancelled": True})), "the cancel is answered", res)
code, ans = call("GET", "/queues/r/items/c1")
check(ans.get("state") == "cancelled", "recorded as cancelled, whatever the report", ans)

# ---- a lease that runs out: handed out again, not a failure; the old token refused ----
add("r", "e1")
it = claim_one("r", lease=1)
time.sleep(0.4)
code, hb = report("r", "e1", "heartbeat", token=it["token"])
check(code == 200 and hb["cancelled"] is False, "a heartbeat extends the lease", hb)
time.sleep(0.8)
code, none = claim("r", wait=0)
check(none == [], "still held after the heartbeat (1.2 s after a 1 s lease)", none)
time.sleep(0.5)
it2 = claim_one("r", wait=3)
check(it2 and it2["key"] == "e1" and it2["attempt"] == 1 and it2["token"] != it["token"],
      "the lease ran out: handed out again, no failure counted", it2)
code, ans = report("r", "e1", "done", token=it["token"])
check(code == 409 and "nothing changed" in ans["error"], "the old token: 409", (code, ans))
code, ans = report("r", "e1", "done", token=it2["token"], result=1)
check(code == 200, "the current token: 200", (code, ans))

# ---- keep_done ----
add("kd", "x")
it = claim_one("kd")
report("kd", "x", "done", token=it["token"])
code, ans = add("kd", "x")
check(ans == {"queued": False, "skipped": "done"} or "done" in json.dumps(ans), "keep_done: a finished key is skipped", ans)

# ---- a flow: its nodes claimed by remote workers, the join once both parts are done ----
code, ans = call("POST", "/flows", {"id": "fr", "nodes": [
    {"queue": "r", "key": "part1"}, {"queue": "r", "key": "part2"},
    {"queue": "r", "key": "join", "after": [{"queue": "r", "key": "part1"}, {"queue": "r", "key": "part2"}]}]})
check(code == 202, "a flow of remote nodes", (code, ans))
code, parts = claim("r", max=10, wait=2)
check(sorted(i["key"] for i in parts) == ["part1", "part2"], "its parts are handed out, the join waits", parts)
code, none = claim("r", wait=0.2)
check(none == [], "nothing else while the parts run", none)
call("POST", "/queues/r/done", [{"key": i["key"], "token": i["token"], "result": i["key"]} for i in parts])
check(all(i.get("flow") == "fr" and i.get("deps") == [] for i in parts), "a node carries its flow's id and deps", parts)
it = claim_one("r", wait=3)
check(it and it["key"] == "join", "the join once both parts are done", it)
deps = sorted((d["key"], d["state"], d.get("result")) for d in (it or {}).get("deps", []))
check(deps == [("part1", "done", "part1"), ("part2", "done", "part2")], "with its dependencies' results", it)
report("r", "join", "done", token=it["token"])
code, fl = call("GET", "/flows/fr")
check(fl.get("done") == 3 and sorted(n.get("result") or "" for n in fl["nodes"]) == ["", "part1", "part2"],
      "the flow is done, with the parts' results", fl)

# ---- batched reports ----
for i in range(50):
    add("r", "b%d" % i)
code, items = claim("r", max=100, wait=2)
check(code == 200 and len(items) == 50, "a claim of up to 100 takes the 50", len(items))
code, ans = call("POST", "/queues/r/heartbeat", [{"key": i["key"], "token": i["token"]} for i in items])
check(code == 200 and all(r["cancelled"] is False for r in ans["results"]), "a batched heartbeat", ans)
body = [{"key": i["key"], "token": i["token"], "result": i["key"]} for i in items]
body.append({"key": "nope", "token": items[0]["token"]})
code, ans = call("POST", "/queues/r/done", body)
check(code == 200 and len(ans["results"]) == 51 and all(r == {"ok": True} for r in ans["results"][:50])
      and ans["results"][50]["status"] in (404, 409), "a batch of reports, each answered in order", ans)
code, ans = call("GET", "/queues/r/items/b7")
check(ans.get("result") == "b7", "a batched result is kept", ans)
code, ans = call("POST", "/queues/r/done", [{"key": "z", "tokn": "1"}])
check(code == 400 and "report 0" in ans["error"], "a malformed report in a batch: 400, none applied", ans)

# ---- a claim that carries the reports of the batch before ----
for i in range(10):
    add("kd", "c%d" % i)
first = []
for _ in range(10):  # a claim answers with what is at hand: 5 in one or more
    code, more = claim("kd", max=5 - len(first), wait=2)
    first += more if code == 200 else []
    if len(first) == 5:
        break
check(len(first) == 5, "a first claim of 5", first)
code, ans = claim("kd", max=5, wait=2, done=[{"key": "zz", "tokn": "1"}])
check(code == 400 and "done report 0" in ans.get("error", ""), "a malformed report in a claim: 400", ans)
code, ans = claim("kd", max=5, wait=2, done={"key": "c0"})
check(code == 400 and "'done'" in ans.get("error", ""), "done not an array: 400 naming it", ans)
done_body = [{"key": i["key"], "token": i["token"], "result": {"by": i["key"]}} for i in first[:4]]
done_body.append({"key": "nope", "token": first[0]["token"]})
fail_body = [{"key": first[4]["key"], "token": first[4]["token"], "error": "again", "retry_in": 0}]
code, ans = claim("kd", max=5, wait=2, done=done_body, fail=fail_body)
check(code == 200 and isinstance(ans, dict) and len(ans.get("results", [])) == 6
      and ans["results"][:4] == [{"ok": True}] * 4 and ans["results"][4].get("status") in (404, 409)
      and ans["results"][5] == {"ok": True}, "the reports answered in order, done then fail", ans)
nxt = ans.get("items", []) if isinstance(ans, dict) else []
check(nxt and not {i["key"] for i in nxt} & {i["key"] for i in first[:4]},
      "and the next items in the same answer (the failed one may be among them)", nxt)
code, got = call("GET", "/queues/kd/items/%s" % first[0]["key"])
check(got.get("state") == "done" and got.get("result") == {"by": first[0]["key"]},
      "a reported result is kept when the claim answers", got)
seen, answers = {}, []
for _ in range(12):  # each claim reports the items of the one before, until none come
    for i in nxt:
        seen.setdefault(i["key"], []).append(i["attempt"])
    code, ans = claim("kd", max=5, wait=0.5, done=[{"key": i["key"], "token": i["token"]} for i in nxt])
    answers.append(ans)
    nxt = ans.get("items", []) if code == 200 and isinstance(ans, dict) else []
    if not nxt:
        break
check(all(a.get("results") and all(r == {"ok": True} for r in a["results"]) for a in answers),
      "every report carried by a claim: ok", answers)
check(sorted(seen) == sorted({"c%d" % i for i in range(10)} - {i["key"] for i in first[:4]})
      and seen.get(first[4]["key"]) == [2] and all(len(v) == 1 for v in seen.values()),
      "each of the rest handed out once, the failed one again with attempt 2", seen)
check(answers and answers[-1].get("items") == [], "the last reports with an empty claim: no items",
      answers[-1:])
code, ans = claim("kd", done=[])
check(code == 200 and ans == {"results": [], "items": []}, "done: [] answers the object form", ans)

# a claim with reports whose client goes away before the answer: the reports still count
import socket
from urllib.parse import urlparse
add("kd", "gone1")
it = claim_one("kd")
body = json.dumps({"max": 1, "wait": 2, "done": [{"key": "gone1", "token": it["token"], "result": 7}]}).encode()
u = urlparse(BASE)
s = socket.create_connection((u.hostname, u.port))
s.sendall(b"POST /queues/kd/claim HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
s.close()
state = None
for _ in range(50):
    code, got = call("GET", "/queues/kd/items/gone1")
    state = got.get("state") if isinstance(got, dict) else None
    if state == "done":
        break
    time.sleep(0.1)
check(state == "done", "a claim's reports count though its client went away", got)
code, ans = call("GET", "/healthz")
check(code == 200, "and the runner goes on", code)

print("remote_check: %d checks, %d failed" % (checks, failed))
sys.exit(1 if failed else 0)
