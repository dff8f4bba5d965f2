"""The load: N client threads submitting workloads and cancelling their own earlier ones
through the REST API, each on a keep-alive connection, recording every answer.

What the invariants need is recorded exactly: the id of every submission answered 201 and of
every cancel answered 200. Every 5xx is kept with its time, so it can be set against the
moments the database was down.
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

CANCEL_SHARE = 0.35  # of requests, when the client has something of its own to cancel


@dataclass
class Answer:
    at: float  # time.monotonic() when the answer (or the error) came
    took: float
    op: str
    path: str
    status: int  # 0: no answer (the connection failed)
    body: str


@dataclass
class Record:
    created: list[int] = field(default_factory=list)
    cancelled: dict[int, float] = field(default_factory=dict)  # id -> when the 200 came
    cancel_bodies_not_cancelled: list[int] = field(default_factory=list)
    statuses: Counter[tuple[str, int]] = field(default_factory=Counter)
    failures: list[Answer] = field(default_factory=list)  # 5xx and no answer
    timings: list[tuple[float, float]] = field(default_factory=list)  # (at, took)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, answer: Answer, data: Any) -> None:
        with self.lock:
            self.statuses[(answer.op, answer.status)] += 1
            self.timings.append((answer.at, answer.took))
            if answer.status == 0 or answer.status >= 500:
                self.failures.append(answer)
            elif answer.op == "submit" and answer.status == 201:
                self.created.append(int(data["id"]))
            elif answer.op == "cancel" and answer.status == 200:
                self.cancelled[int(data["id"])] = answer.at
                if data.get("state") != "cancelled":
                    self.cancel_bodies_not_cancelled.append(int(data["id"]))

    def slowest(self, windows: list[tuple[float, float]] | None = None) -> float:
        """The longest wait for an answer (of those overlapping `windows`, if given)."""
        return max((took for at, took in self.timings if windows is None or any(
            at >= start and at - took <= end for start, end in windows)), default=0.0)


class Client:
    """One API client with its own keep-alive connection."""

    def __init__(self, port: int, token: str, record: Record) -> None:
        self.port, self.record = port, record
        self.headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
        self.conn: http.client.HTTPConnection | None = None

    def call(self, op: str, method: str, path: str, body: dict | None = None) -> tuple[int, Any]:
        t0 = time.monotonic()
        status, text = 0, ""
        try:
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            self.conn.request(method, path, body=None if body is None else json.dumps(body),
                              headers=self.headers)
            response = self.conn.getresponse()
            status, text = response.status, response.read().decode(errors="replace")
            if response.will_close:
                self.close()
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            text = repr(exc)
        data: Any = None
        if status in (200, 201):
            data = json.loads(text)
        now = time.monotonic()
        self.record.add(Answer(now, now - t0, op, path, status, text[:300]), data)
        return status, data

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def submission(rnd: random.Random, name: str, queue: str) -> dict[str, Any]:
    """A mixed workload: mostly training, some preemptible batch, some inference that may
    preempt (all preemptible), 1 to 16 GPUs, running 30 s to 10 min simulated (0.5 to 10 s
    of wall time at the clusters' 60x)."""
    klass = rnd.choices(("training", "batch-low", "inference-high"), (8, 1, 1))[0]
    return {"name": name, "queue": queue, "priority_class": klass, "preemptible": True,
            "termination_grace_s": rnd.choice((0, 1, 2)),
            "duration_hint_s": rnd.choice((30, 60, 120, 300, 600)),
            "pods": [{"count": rnd.choice((1, 1, 1, 2)), "flavors": ["a100-80g"],
                      "gpus": rnd.choice((1, 2, 4, 8)), "cpu": 4, "memory_gib": 16}]}


def client_loop(n: int, *, port: int, token: str, queue: str, record: Record,
                stop_at: float, think_s: float, seed: int) -> None:
    rnd = random.Random(seed * 100_003 + n)
    client = Client(port, token, record)
    mine: list[int] = []
    i = 0
    while time.monotonic() < stop_at:
        if mine and rnd.random() < CANCEL_SHARE:
            pk = mine.pop(rnd.randrange(len(mine)))
            status, _ = client.call("cancel", "POST", f"/api/v1/workloads/{pk}/cancel")
            if status == 0 or status >= 500:
                mine.append(pk)  # no verdict: it may be tried again
        else:
            status, data = client.call("submit", "POST", "/api/v1/workloads",
                                       submission(rnd, f"chaos-{n}-{i}", queue))
            if status == 201:
                mine.append(int(data["id"]))
            i += 1
        time.sleep(rnd.uniform(0, 2 * think_s))
    client.close()


def run_load(*, port: int, researchers: list[tuple[str, str]], clients: int, seconds: float,
             think_s: float, seed: int, record: Record) -> None:
    """`clients` threads for `seconds`; researchers' tokens shared round robin."""
    stop_at = time.monotonic() + seconds
    threads = [threading.Thread(target=client_loop, args=(n,), kwargs={
        "port": port, "token": researchers[n % len(researchers)][0],
        "queue": researchers[n % len(researchers)][1], "record": record,
        "stop_at": stop_at, "think_s": think_s, "seed": seed}, daemon=True)
        for n in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
