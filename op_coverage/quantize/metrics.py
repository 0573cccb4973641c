"""What INT8 costs and gives: file size, onnxruntime CPU latency ratio, accuracy per output.

Latency follows ``bench/bench_rewrite_latency.py``: one intra-op and one inter-op thread, runs
alternating between the float and the quantized session (float first on even runs), a ratio per
repeat of ``median(quantized) / median(float)``; the report gives the median ratio over repeats
with its min and max.  With onnxruntime's default result beside hal's (the report's ``baseline``)
the three sessions run in turn, the order rotating every run, and both ratios share the float runs.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np


#: (resolved path, size, mtime) -> the external-data file names of that model file
_EXTERNAL: dict = {}


def model_bytes(path: Path) -> int:
    """Bytes of the model file and of every external-data file it names.

    The names are read once per file version (path, size and modification time): one quantize run
    asks for the same file's size up to three times, and each read parses the whole model.
    """
    import onnx

    from op_coverage.onnx.load import iter_tensors
    path = Path(path)
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    files = _EXTERNAL.get(key)
    if files is None:
        m = onnx.load(str(path), load_external_data=False)
        files = _EXTERNAL[key] = {dict((e.key, e.value) for e in t.external_data).get("location")
                                  for t in iter_tensors(m) if t.data_location == onnx.TensorProto.EXTERNAL}
    return st.st_size + sum((path.parent / f).stat().st_size for f in files if f and (path.parent / f).is_file())


def session(path: Path):
    """An onnxruntime CPU session with one intra-op and one inter-op thread (latency comparable across runs)."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


@dataclass
class OutputAccuracy:
    """How far one quantized output is from the float one."""

    name: str
    shape: list
    max_abs: float
    max_rel: float
    cosine: float | None
    top1: float | None  # share of rows whose argmax over the last axis agrees; None: not classifier-shaped

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def accuracy(name: str, want: np.ndarray, got: np.ndarray) -> OutputAccuracy:
    """Max abs and relative error, cosine similarity and (for ``[..., C]``, C >= 2) top-1 agreement."""
    want, got = np.asarray(want), np.asarray(got)
    if want.shape != got.shape or not np.issubdtype(want.dtype, np.number):
        same = want.shape == got.shape and bool(np.array_equal(want, got))
        return OutputAccuracy(name, list(want.shape), 0.0 if same else float("inf"),
                              0.0 if same else float("inf"), None, None)
    w, g = want.astype(np.float64).ravel(), got.astype(np.float64).ravel()
    diff = np.abs(w - g)
    max_abs = float(diff.max()) if diff.size else 0.0
    scale = float(np.abs(w).max()) if w.size else 0.0
    max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
    cosine = top1 = None
    if np.issubdtype(want.dtype, np.floating) and w.size:
        # numpy's pairwise sums, not BLAS (np.linalg.norm, @): OpenBLAS splits a long dot product over
        # its threads, which on a busy machine took 10-40 ms for 32k values (the threads' wake-up) and
        # made the last bits depend on the core count; the sums take microseconds and do not.
        nw, ng = np.sqrt(np.sum(w * w)), np.sqrt(np.sum(g * g))
        cosine = float(np.sum(w * g) / (nw * ng)) if nw > 0 and ng > 0 else (1.0 if nw == ng else 0.0)
        if want.ndim >= 2 and want.shape[-1] >= 2:
            top1 = float(np.mean(want.argmax(-1) == got.argmax(-1)))
    return OutputAccuracy(name, list(want.shape), max_abs, max_rel, cosine, top1)


def compare_outputs(float_sess, quant_sess, feeds: dict) -> list[OutputAccuracy]:
    """Run both sessions on *feeds*; one :class:`OutputAccuracy` per output of the float model."""
    names = [o.name for o in float_sess.get_outputs()]
    want = float_sess.run(None, feeds)
    got = quant_sess.run(names, feeds)
    return [accuracy(n, w, g) for n, w, g in zip(names, want, got)]


def interleaved(sess_a, others: list, feeds: dict, runs: int, repeats: int, warmup: int = 2) -> list[list[tuple]]:
    """Run *sess_a* and each session of *others* in turn (the order rotates every run), *repeats* times.

    Returns, per session of *others*, one ``(median_b / median_a, median_a_s, median_b_s)`` per
    repeat: all sessions share whatever load the machine has, run by run, and the float runs of
    *sess_a* are the denominator of every ratio (with one other session: a, b, then b, a).
    """
    sessions = [sess_a, *others]
    for s in sessions:
        for _ in range(warmup):
            s.run(None, feeds)
    out: list[list[tuple]] = [[] for _ in others]
    n = len(sessions)
    for _ in range(repeats):
        times: list[list[float]] = [[] for _ in sessions]
        for i in range(runs):
            for j in (*range(i % n, n), *range(i % n)):
                t0 = time.perf_counter()
                sessions[j].run(None, feeds)
                times[j].append(time.perf_counter() - t0)
        ma = statistics.median(times[0])
        for k, tb in enumerate(times[1:]):
            mb = statistics.median(tb)
            out[k].append((mb / ma if ma > 0 else float("inf"), ma, mb))
    return out


def latencies(float_sess, quant_sessions: list, feeds: dict, runs: int = 10, repeats: int = 3,
              warmup: int = 2) -> list[dict]:
    """One :func:`latency` dict per session of *quant_sessions*, all from one interleave with *float_sess*."""
    found = []
    for per in interleaved(float_sess, quant_sessions, feeds, runs, repeats, warmup):
        ratios, fl, ql = [r for r, _, _ in per], [a for _, a, _ in per], [b for _, _, b in per]
        found.append({"ratio": round(statistics.median(ratios), 4), "min": round(min(ratios), 4),
                      "max": round(max(ratios), 4), "float_ms": round(statistics.median(fl) * 1e3, 4),
                      "quantized_ms": round(statistics.median(ql) * 1e3, 4), "runs": runs, "repeats": repeats,
                      "threads": 1})
    return found


def latency(float_sess, quant_sess, feeds: dict, runs: int = 10, repeats: int = 3, warmup: int = 2) -> dict:
    """Interleaved runs; ``{"ratio", "min", "max", "float_ms", "quantized_ms", "runs", "repeats", "threads"}``."""
    return latencies(float_sess, [quant_sess], feeds, runs, repeats, warmup)[0]
