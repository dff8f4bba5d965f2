"""What enters the pending set (§4.7): rejection at submission, CPU-only flavor order."""

from __future__ import annotations

from scheduling.engine import FlavorSpec, ReasonCode, Snapshot, check_request

from .builders import A100, cluster, engine, q, run, wl

RC = ReasonCode


def test_check_request_rejections() -> None:
    snap = Snapshot(now=0, queues=(q("rd", 16, 24), q("rd/v", 8, 16)),
                    clusters=(cluster(nodes=2),), flavors=(FlavorSpec(A100, 80),))
    codes = {
        "max": check_request(wl("x", "rd/v", 8, count=3), snap),
        "mem": check_request(wl("x", "rd/v", 8, gpu_memory_gib=96), snap),
        "np": check_request(wl("x", "rd/v", 8, count=2, preemptible=False), snap),
        "gang": check_request(wl("x", "rd/v", 16), snap),
        "parent": check_request(wl("x", "rd", 8), snap),
        "flavor": check_request(wl("x", "rd/v", 8, flavors=("h100",)), snap),
        "ok": check_request(wl("x", "rd/v", 8, count=2), snap),
    }
    assert [r.code for r in codes["max"]] == [RC.QUOTA_MAX, RC.NO_CAPACITY]
    assert "queue rd/v a100-80g/gpu: requested 24 > max 16" == codes["max"][0].message
    assert codes["mem"][0].code == RC.GPU_MEMORY_INSUFFICIENT
    assert "96 GiB per GPU > 80 GiB" in codes["mem"][0].message
    assert codes["np"][0].code == RC.NON_PREEMPTIBLE_BEYOND_MIN
    assert codes["gang"][0].code == RC.NO_CAPACITY
    assert codes["parent"][0].code == RC.INVALID_REQUEST
    assert "not a leaf" in codes["parent"][0].message
    assert codes["flavor"][0].code == RC.INVALID_REQUEST
    assert codes["ok"] == []


def test_cpu_only_work_prefers_cpu_nodes() -> None:
    eng = engine([q("a", 0, 64)], [cluster("c", nodes=1), cluster("k", nodes=1, gpus=0,
                                                                  flavor="cpu")])
    res = run(eng, 0, wl("w", "a", 0, cpu=4, flavors=(A100, "cpu")))
    assert res.admitted[0].flavor == "cpu"
