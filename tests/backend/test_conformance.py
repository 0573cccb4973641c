"""Every usable backend (cpu and the emulator here; cuda or vendor devices where present)
passes the conformance kit; skips carry the reason."""
from hal.conformance import run_conformance


def test_backend_passes_the_conformance_kit(hal_backend):
    report = run_conformance(hal_backend.name)
    failures = [f"{r['id']}: {r['reason']}" for r in report["checks"] if r["status"] == "fail"]
    assert failures == []
    assert report["verdict"] == "pass"
    assert all(r["reason"] for r in report["checks"] if r["status"] == "skip")
    assert {r["id"] for r in report["checks"] if r["status"] == "pass"} >= \
        {"metadata", "probe", "load", "device", "rng", "checkpoint", "collectives", "op_profile"}
