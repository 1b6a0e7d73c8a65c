#!/usr/bin/env python3
"""A remote worker for wqrun (SPEC 10.2), standard library only (Python 3.8+).

Copy this file next to your code. A worker claims items of one queue from a
runner's HTTP API (``wqrun --serve --listen ...``), runs a function on each,
keeps their leases alive while they run, and reports every outcome::

    from wqrun_worker import Worker, Retry, Fail

    def resize(key, payload, job):
        if job.cancelled:                 # a cancel, told by the heartbeat
            return None
        if payload.get("busy"):
            raise Retry(30, "busy, again in 30 s")  # a failure, retried in 30 s
        if "url" not in payload:
            raise Fail("no url")          # a permanent failure: dead at once
        return {"size": 42}               # done, with this result (any JSON)

    Worker("http://127.0.0.1:8080", "thumbs", resize, threads=4).run()

or from the shell: ``python3 wqrun_worker.py URL QUEUE MODULE:FUNC``.

Any other exception is a failure with its message, retried by the queue's
rules. Outcomes are reported in batches; a report that cannot be sent (the
runner is unreachable or restarting) is kept and sent again with a backoff,
never dropped. A report answered 409 or 404 means the item's lease ran out
and it was handed out again: nothing changed, so it is logged and dropped.
Claimed items are held until their outcome is reported; ``batch`` bounds how
many at a time (claim fewer for long jobs: each is held while it waits for
a thread). Reports go to the runner the claims came from, as they must. The
outcomes ready when the next claim is made go with it (``{"done": [...]}`` in
the claim): on PostgreSQL one transaction then commits them and claims the
next items; the rest go in batches of their own.
"""

import argparse
import http.client
import importlib
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

__all__ = ["Worker", "Job", "Retry", "Fail", "main"]
log = logging.getLogger("wqrun_worker")


class Retry(Exception):
    """Raise to fail this attempt and have it retried in `seconds`."""

    def __init__(self, seconds, msg="retry"):
        super().__init__(msg)
        self.seconds = max(0.0, float(seconds))


class Fail(Exception):
    """Raise to fail permanently: the item is dead-lettered, no retry."""


class _Flag(threading.Event):
    """An Event that is also true when set: ``if job.cancelled:``, ``job.cancelled.wait(5)``."""

    def __bool__(self):
        return self.is_set()


class Job:
    """What fn gets as its third argument: one claimed item's run."""

    def __init__(self, item):
        self.key = item["key"]
        self.payload = item.get("payload")
        self.attempt = item.get("attempt", 1)
        self.token = item["token"]
        self.lease_until = item.get("lease_until")
        self.cancelled = _Flag()  # set when the key is cancelled or its lease was lost
        self.lost = False  # the lease ran out: the item was handed out again
        self.reported = False  # its outcome is waiting to be sent (or on its way)
        self.sending = False  # its report is on its way: no heartbeat for it meanwhile

    def __repr__(self):
        return "<Job %r attempt %s>" % (self.key, self.attempt)


class HTTPError(Exception):
    """The runner answered with an error status (body: its {"error": ...} text)."""

    def __init__(self, status, body):
        super().__init__("HTTP %d: %s" % (status, body))
        self.status, self.body = status, body


# what a lost or refused connection, or a garbled answer, raises: sent again later
NET_ERRORS = (OSError, ValueError, KeyError, TypeError, http.client.HTTPException)


class Worker:
    """Claims items of `queue` at `base_url` and runs fn(key, payload, job) on `threads` threads.

    batch: items claimed at most at a time; lease: seconds each claim lasts (heartbeats extend
    it every lease/3 s while the item is held); wait: seconds a claim long-polls (above 0: on
    PostgreSQL a claim answers with what the runner took from the database meanwhile);
    token: the runner's --token.
    """

    def __init__(self, base_url, queue, fn, token=None, batch=100, lease=30, wait=20, threads=1):
        if not (1 <= batch <= 1000 and 0 < lease <= 86400 and 0 < wait <= 600 and threads >= 1):
            raise ValueError("batch 1..1000, lease and wait above 0 (at most 86400, 600), threads >= 1")
        self._url = urllib.parse.urlsplit(base_url)
        if self._url.scheme not in ("http", "https") or not self._url.hostname:
            raise ValueError("base_url: http://HOST:PORT or https://..., not %r" % base_url)
        self._path = self._url.path.rstrip("/") + "/queues/" + urllib.parse.quote(queue, safe="")
        self.fn, self.token = fn, token
        self.batch, self.lease, self.wait, self.threads = batch, lease, wait, threads
        self._lock = threading.Condition()
        self._held = {}  # key -> Job: claimed, outcome not yet acknowledged
        self._pending = {"done": [], "fail": []}  # reports to send: (job, body)
        self._inflight = set()  # ids of the entries of _pending on their way
        self._combine = True  # claims carry reports (off against a runner that refuses them)
        self._stopping = threading.Event()
        self._claiming = True
        self._claim_conn = None  # the connection of the claim under way (stop() cuts it short)

    # ---- HTTP ----

    def _post(self, path, body, timeout=30, claim=False):
        """POSTs body as JSON; returns the decoded answer, raises HTTPError or a NET_ERRORS one."""
        cls = http.client.HTTPSConnection if self._url.scheme == "https" else http.client.HTTPConnection
        conn = cls(self._url.hostname, self._url.port, timeout=timeout)
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        try:
            conn.connect()
            if claim:
                with self._lock:
                    if self._stopping.is_set():
                        return []
                    self._claim_conn = conn
            conn.request("POST", self._path + path, json.dumps(body), headers)
            r = conn.getresponse()
            data = r.read()
        finally:
            if claim:
                with self._lock:
                    self._claim_conn = None
            conn.close()
        if r.status != 200:
            raise HTTPError(r.status, data.decode(errors="replace").strip())
        return json.loads(data)

    # ---- the main loop: claim and run ----

    def run(self):
        """Claims and runs items until stop(); then finishes what it holds and returns."""
        pool = ThreadPoolExecutor(self.threads, thread_name_prefix="wqrun-job")
        helpers = [threading.Thread(target=f, daemon=True, name=f.__name__)
                   for f in (self._reporter, self._heartbeater)]
        for t in helpers:
            t.start()
        delay, skip_once = 0, False
        try:
            while not self._stopping.is_set():
                with self._lock:  # held items whose outcome is ready go with the claim
                    while self._busy() >= self.batch and not self._stopping.is_set():
                        self._lock.wait(1)
                    room = self.batch - self._busy()
                    combine, skip_once = self._combine and not skip_once, False
                    carried = {k: self._take(k) for k in ("done", "fail")} if combine else None
                if self._stopping.is_set():
                    if carried:
                        self._release(carried["done"] + carried["fail"])
                    break
                body = {"max": room, "wait": self.wait, "lease": self.lease}
                if carried is not None:
                    body.update((k, [b for _, b in v]) for k, v in carried.items())
                    if carried["done"] or carried["fail"]:  # their answers come with the claim's:
                        body["wait"] = min(self.wait, 1)  # soon, even when no item comes
                try:
                    answer = self._post("/claim", body, timeout=self.wait + 30, claim=True)
                    delay = 0
                except HTTPError as e:
                    if carried is not None:
                        self._release(carried["done"] + carried["fail"])
                    if e.status == 400 and carried is not None and "unknown field" in e.body:
                        log.info("the runner takes no reports in a claim: they go on their own")
                        self._combine = False
                        continue
                    if e.status == 400 and carried is not None and "report" in e.body:
                        skip_once = True  # a report it refused: the reporter finds which
                        continue
                    if e.status in (400, 401, 403, 404):
                        raise  # a wrong queue, token or setting: trying again will not help
                    delay = self._backoff(delay, "claim", e)
                    continue
                except NET_ERRORS as e:
                    if carried is not None:
                        self._release(carried["done"] + carried["fail"])
                    if self._stopping.is_set():
                        break  # stop() cut the claim short
                    delay = self._backoff(delay, "claim", e)
                    continue
                if carried is None:
                    items = answer
                else:
                    items, results = answer.get("items", []), answer["results"]
                    nd = len(carried["done"])
                    self._acknowledged("done", carried["done"], results[:nd])
                    self._acknowledged("fail", carried["fail"], results[nd:])
                for item in items:
                    job = Job(item)
                    with self._lock:
                        self._held[job.key] = job
                    pool.submit(self._run_one, job)
        finally:
            self._stopping.set()
            pool.shutdown(wait=True)  # what was claimed is run and reported
            with self._lock:
                self._claiming = False
                self._lock.notify_all()
            for t in helpers:
                t.join()

    def stop(self):
        """Asks run() to return: no more claims (a claim waiting for items is cut short); the
        items held are run and their outcomes reported first. Safe from a signal handler."""
        self._stopping.set()
        conn = self._claim_conn
        if conn is not None and conn.sock is not None:
            try:  # (an item the runner handed to that very claim is handed out again after its lease)
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        with self._lock:
            self._lock.notify_all()

    def _backoff(self, delay, what, err, interruptible=True):
        delay = min(30.0, delay * 2 or 0.5)
        log.warning("%s: %s; again in %.1f s", what, err, delay)
        if interruptible:
            self._stopping.wait(delay)  # a claim: stop() need not wait for it
        else:
            time.sleep(delay)
        return delay

    def _run_one(self, job):
        if job.cancelled:  # cancelled while it waited for a thread: not run at all
            self._report(job, "fail", {"error": "cancelled before it started"})
            return
        try:
            result = self.fn(job.key, job.payload, job)
            json.dumps(result)  # a result that is not JSON is a failure, not a lost report
            kind, body = "done", {"result": result}
        except Retry as e:
            kind, body = "fail", {"error": str(e), "retry_in": e.seconds}
        except Fail as e:
            kind, body = "fail", {"error": str(e) or "failed", "permanent": True}
        except Exception as e:  # noqa: BLE001 - any error of fn is the item's failure
            kind, body = "fail", {"error": "%s: %s" % (type(e).__name__, e)}
        self._report(job, kind, body)

    def _report(self, job, kind, body):
        body.update(key=job.key, token=job.token)
        with self._lock:
            job.reported = True
            self._pending[kind].append((job, body))
            self._lock.notify_all()

    def _sendable(self):
        """Whether a report waits that is not on its way (under the lock)."""
        return any(id(e) not in self._inflight for k in ("done", "fail") for e in self._pending[k])

    def _busy(self):
        """Held items still running or waiting for a thread (under the lock)."""
        return sum(1 for j in self._held.values() if not j.reported)

    def _take(self, kind, most=1000):
        """Up to `most` reports of kind not on their way yet, now on their way (under the lock)."""
        taken = [e for e in self._pending[kind] if id(e) not in self._inflight][:most]
        for e in taken:
            self._inflight.add(id(e))
            e[0].sending = True
        return taken

    def _release(self, entries):
        """Reports that did not get through: to be sent again."""
        with self._lock:
            for e in entries:
                self._inflight.discard(id(e))
                e[0].sending = False
            self._lock.notify_all()

    # ---- reports: batched, kept until the runner has them ----

    def _reporter(self):
        delay = 0
        while True:
            with self._lock:  # (reports a claim carries are not this thread's to send)
                while not self._sendable() and self._claiming:
                    self._lock.wait()
                if not (self._pending["done"] or self._pending["fail"]):
                    return
                if not self._sendable():
                    self._lock.wait(0.1)  # the last claim's reports: on their way
                    continue
            time.sleep(0.01)  # lets a few more outcomes join the batch (or the next claim take them)
            for kind in ("done", "fail"):
                with self._lock:
                    sending = self._take(kind)
                if not sending:
                    continue
                try:
                    answer = self._post("/" + kind, [b for _, b in sending])["results"]
                    delay = 0
                except (HTTPError,) + NET_ERRORS as e:
                    if isinstance(e, HTTPError) and e.status == 400 and len(sending) > 1:
                        self._resend_one_by_one(kind, sending)
                        continue
                    if isinstance(e, HTTPError) and e.status == 400:
                        self._refused(kind, sending[0], e.body)
                        continue
                    self._release(sending)
                    delay = self._backoff(delay, "report", e, False)  # kept: sent again
                    break
                self._acknowledged(kind, sending, answer)

    def _resend_one_by_one(self, kind, sending):
        """A batch refused as malformed (say a result over 1 MiB): each one on its own."""
        for i, (job, body) in enumerate(sending):
            try:
                answer = self._post("/" + kind, [body])["results"]
            except HTTPError as e:
                if e.status != 400:
                    self._release(sending[i:])  # the rest is kept for the next round
                    return
                self._refused(kind, (job, body), e.body)
                continue
            except NET_ERRORS:
                self._release(sending[i:])
                return
            self._acknowledged(kind, [(job, body)], answer)

    def _unpend(self, kind, sent):
        ids = {id(e) for e in sent}
        self._pending[kind] = [e for e in self._pending[kind] if id(e) not in ids]
        self._inflight -= ids  # (an id may be reused once its entry is gone)
        for job, _ in sent:
            job.sending = False

    def _refused(self, kind, entry, why):
        job, body = entry
        with self._lock:
            self._unpend(kind, [entry])
            if kind == "done":  # the result was refused: the run fails, saying why
                self._pending["fail"].append(
                    (job, {"key": job.key, "token": job.token, "error": "result refused: " + why}))
            else:
                self._forget(job)
        log.error("%s report of %r refused: %s", kind, job.key, why)

    def _acknowledged(self, kind, sending, answer):
        with self._lock:
            self._unpend(kind, sending)
            for (job, body), a in zip(sending, answer):
                self._forget(job)
                if not a.get("ok"):
                    log.warning("%s of %r dropped (%s): %s", kind, job.key, a.get("status"),
                                a.get("error"))

    def _forget(self, job):
        if self._held.get(job.key) is job:
            del self._held[job.key]
        self._lock.notify_all()

    # ---- heartbeats: leases extended, cancels told ----

    def _heartbeater(self):
        every = self.lease / 3
        while True:
            with self._lock:
                if not self._claiming and not self._held:
                    return
                jobs = [j for j in self._held.values() if not j.sending]  # (a report ends it)
            pause, t0 = every, time.monotonic()
            if jobs:
                try:
                    answer = self._post("/heartbeat", [{"key": j.key, "token": j.token} for j in jobs],
                                        timeout=max(1.0, every))["results"]
                    for job, a in zip(jobs, answer):
                        self._beaten(job, a)
                except (HTTPError,) + NET_ERRORS as e:
                    log.warning("heartbeat: %s", e)
                    pause = min(every, 1.0)
            with self._lock:  # (woken by every report: sleeps on until the pause is over)
                while self._claiming or self._held:
                    left = t0 + pause - time.monotonic()
                    if left <= 0:
                        break
                    self._lock.wait(left)

    def _beaten(self, job, a):
        with self._lock:
            if self._held.get(job.key) is not job:
                return  # reported meanwhile
        if a.get("cancelled"):
            if not job.cancelled:
                log.info("%r cancelled", job.key)
            job.cancelled.set()
        elif "error" in a:
            if not job.lost:
                log.warning("lease of %r lost: %s", job.key, a["error"])
            job.lost = True
            job.cancelled.set()
        else:
            job.lease_until = a.get("lease_until", job.lease_until)


def main(argv=None):
    """python3 wqrun_worker.py URL QUEUE MODULE:FUNC [--token T] [--batch N] [--lease S] ..."""
    p = argparse.ArgumentParser(description="Run a Python function as a wqrun remote worker.")
    p.add_argument("url", help="the runner's HTTP address, e.g. http://127.0.0.1:8080")
    p.add_argument("queue")
    p.add_argument("func", metavar="MODULE:FUNC", help="fn(key, payload, job), imported from MODULE")
    p.add_argument("--token", default=os.environ.get("WQRUN_TOKEN"),
                   help="the runner's --token (default: $WQRUN_TOKEN)")
    p.add_argument("--batch", type=int, default=100, help="items claimed at a time (default 100)")
    p.add_argument("--lease", type=float, default=30, help="lease seconds (default 30)")
    p.add_argument("--wait", type=float, default=20, help="claim long-poll seconds (default 20)")
    p.add_argument("--threads", type=int, default=1, help="items run at once (default 1)")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="wqrun_worker: %(message)s")
    module, _, name = a.func.partition(":")
    if not name:
        p.error("MODULE:FUNC, e.g. tasks:resize")
    sys.path.insert(0, os.getcwd())
    fn = getattr(importlib.import_module(module), name)
    w = Worker(a.url, a.queue, fn, token=a.token, batch=a.batch, lease=a.lease, wait=a.wait,
               threads=a.threads)

    def on_signal(sig, _frame):  # the first one: a clean stop; a second one ends it at once
        log.info("stopping: finishing the %d items held (again to abandon them)", len(w._held))
        signal.signal(sig, signal.SIG_DFL)
        w.stop()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    try:
        w.run()
    except HTTPError as e:
        log.error("%s", e)
        return 1
    return 0


if __name__ == "__main__":
    # run as a script, this module is __main__: the fn's `from wqrun_worker import Retry, Fail`
    # must get these very classes, not a second copy of the module
    sys.modules.setdefault("wqrun_worker", sys.modules["__main__"])
    sys.exit(main())
