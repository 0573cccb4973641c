"""onnxruntime's own quantization with its defaults, measured beside ``op_coverage quantize``'s result.

``--mode dynamic``: ``quantize_dynamic(model, out, weight_type=QuantType.QInt8)``; ``--mode static``:
``quantize_static(model, out, reader)`` (QDQ, QInt8, on the same calibration inputs).  The report's
``baseline`` holds its size, latency and accuracy, and how hal's result compares
(``size_vs_baseline`` = hal bytes / onnxruntime bytes).
"""
from __future__ import annotations

from pathlib import Path

#: the call, as a user would write it, per --mode
CALLS = {"dynamic": "quantize_dynamic(model, out, weight_type=QuantType.QInt8)",
         "static": "quantize_static(model, out, calibration_reader)"}


def default_quantize(src: Path, dst: Path, mode: str, calibration: list[dict], external: bool) -> None:
    """onnxruntime.quantization with its defaults into *dst*; raises what onnxruntime raises."""
    from onnxruntime.quantization import QuantType, quantize_dynamic, quantize_static

    from op_coverage.quantize.ort import _FeedList, _quiet
    with _quiet():
        if mode == "dynamic":
            quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, use_external_data_format=external)
        else:
            quantize_static(str(src), str(dst), _FeedList(calibration), use_external_data_format=external)


def measure_baseline(src: Path, dst: Path, mode: str, calibration: list[dict], external: bool, float_sess, feeds,
                     hal_bytes: int, runs: int, repeats: int, made: bool | str = False, same=None,
                     ours=None) -> tuple[dict, dict | None]:
    """``{"call", "bytes", "ratio", "size_vs_baseline", "latency", "accuracy"}`` of onnxruntime's default result,
    and hal's result's latency when measured here (else ``None``: the caller measures it).

    ``error`` instead of the figures when onnxruntime cannot quantize or run the model its own way.

    :param made: True when *dst* holds that result already (made while choosing), a string when the
        call failed then (the message), False to make it now.
    :param same: ``(path, outputs)`` of hal's result: when *dst* has the same bytes as that file, its
        latency and accuracy are that result's (one model, measured once).
    :param ours: the session of hal's result, with *runs* > 0: both results are timed in one
        interleave with the float model (:func:`~op_coverage.quantize.metrics.latencies`), whose
        runs are the denominator of both ratios.
    """
    from op_coverage.quantize.metrics import compare_outputs, latencies, model_bytes, session
    out = {"call": CALLS[mode]}
    if isinstance(made, str):
        out["error"] = made
        return out, None
    mine = lat = None
    try:
        if not made:
            default_quantize(src, dst, mode, calibration, external)
        if same is not None and not external and same[0].read_bytes() == dst.read_bytes():
            acc = same[1]
            out["same_file"] = True
            if runs > 0 and ours is not None:
                mine = lat = latencies(float_sess, [ours], feeds, runs=runs, repeats=repeats)[0]
        else:
            sess = session(dst)
            acc = compare_outputs(float_sess, sess, feeds)
            if runs > 0 and ours is not None:
                mine, lat = latencies(float_sess, [ours, sess], feeds, runs=runs, repeats=repeats)
            elif runs > 0:
                lat = latencies(float_sess, [sess], feeds, runs=runs, repeats=repeats)[0]
    except Exception as e:  # noqa: BLE001 - onnxruntime raises assorted types
        out["error"] = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
        return out, None
    fb, bb = model_bytes(src), model_bytes(dst)
    out.update({"bytes": bb, "ratio": round(bb / fb, 4) if fb else None,
                "size_vs_baseline": round(hal_bytes / bb, 4) if bb else None,
                "latency": lat, "accuracy": [o.to_dict() for o in acc]})
    return out, mine
