"""The onnxruntime.quantization calls behind ``op_coverage quantize``: pre-processing, one quantization, calibration.

No quantizer of our own: every INT8 model comes from ``quantize_dynamic`` or ``quantize_static``;
this module only turns a format of ``data/quantize_formats.json`` and a variant into their arguments.
"""
from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import tempfile
import types
import warnings
from pathlib import Path


class _FeedList:
    """A ``CalibrationDataReader`` over a list of feed dicts (onnxruntime asks for them one by one)."""

    def __init__(self, feeds: list[dict]):
        self.feeds = feeds
        self._it = iter(feeds)

    def get_next(self):
        return next(self._it, None)

    def rewind(self):
        self._it = iter(self.feeds)


@contextlib.contextmanager
def _quiet():
    """onnxruntime.quantization logs advice through the root logger and prints; keep the report clean."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        root.setLevel(level)


def _lazy_infer_input_info(*args, **kwargs):
    """onnxruntime.tools.infer_input_info, imported (with torch) only when someone calls it."""
    import importlib
    sys.modules.pop("onnxruntime.tools.pytorch_export_helpers", None)
    return importlib.import_module("onnxruntime.tools.pytorch_export_helpers").infer_input_info(*args, **kwargs)


@contextlib.contextmanager
def torch_free():
    """Within it, importing ``onnxruntime.tools`` (symbolic shape inference) does not import torch.

    ``onnxruntime/tools/__init__.py`` imports its PyTorch export helpers, and so torch (about 1.2 s),
    whenever torch is installed; quantization needs neither.  Unless torch or ``onnxruntime.tools``
    is loaded already, the helpers module is stood in for by one whose ``infer_input_info`` imports
    the real module on first call, so nothing is lost.
    """
    name = "onnxruntime.tools.pytorch_export_helpers"
    if "torch" in sys.modules or "onnxruntime.tools" in sys.modules:
        yield
        return
    stand_in = types.ModuleType(name)
    stand_in.infer_input_info = _lazy_infer_input_info
    sys.modules[name] = stand_in
    try:
        yield
    finally:
        if sys.modules.get(name) is stand_in:
            del sys.modules[name]


def import_quantization():
    """``onnxruntime.quantization``, imported inside :func:`torch_free`."""
    with torch_free():
        import onnxruntime.quantization
    return onnxruntime.quantization


@contextlib.contextmanager
def _scratch_cwd(beside: Path):
    """Run inside a temporary folder beside *beside*: onnxruntime's symbolic shape inference writes
    ``sym_shape_infer_temp.onnx`` and uuid-named ``.data`` files into the current folder, which
    is the user's; they go with the folder."""
    here = os.getcwd()
    with tempfile.TemporaryDirectory(prefix=".op_coverage-quantize-", dir=beside.parent) as scratch:
        os.chdir(scratch)
        try:
            yield
        finally:
            os.chdir(here)


def pre_process(src: Path, dst: Path, external: bool) -> str | None:
    """onnxruntime's ``quant_pre_process`` (symbolic shape inference, basic optimisation) into *dst*.

    :returns: ``None`` when it worked, else why not (the caller quantizes the model as it is).
    """
    from onnxruntime.quantization.shape_inference import quant_pre_process
    try:
        with _quiet(), torch_free(), _scratch_cwd(Path(dst).resolve()):
            quant_pre_process(str(Path(src).resolve()), str(Path(dst).resolve()), save_as_external_data=external, all_tensors_to_one_file=True,
                              external_data_location=dst.name + ".data" if external else None)
    except Exception as e:  # noqa: BLE001 - symbolic shape inference refuses some models (subgraphs, odd ops)
        return f"onnxruntime's quant_pre_process failed ({str(e).splitlines()[0][:200] if str(e) else type(e).__name__})"
    return None


def quantize_once(src: Path, dst: Path, fmt: dict, variant: dict, op_types: list[str], *, exclude: list[str],
                  per_channel: bool, calibration: list[dict] | None, external: bool) -> None:
    """Quantize *src* into *dst* with one format and variant; raises what onnxruntime raises."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static
    weight = getattr(QuantType, variant["weight"])
    with _quiet():
        if fmt["call"] == "quantize_dynamic":
            quantize_dynamic(str(src), str(dst), op_types_to_quantize=op_types, per_channel=per_channel,
                             weight_type=weight, nodes_to_exclude=exclude, use_external_data_format=external,
                             extra_options={"EnableSubgraph": True})
            sort_nodes(dst)
            return
        quantize_static(str(src), str(dst), _FeedList(calibration or []),
                        quant_format=getattr(QuantFormat, fmt["quant_format"]), op_types_to_quantize=op_types,
                        per_channel=per_channel, activation_type=getattr(QuantType, variant["activation"]),
                        weight_type=weight, nodes_to_exclude=exclude, use_external_data_format=external,
                        extra_options={"EnableSubgraph": True})
    sort_nodes(dst)


def _reads_inside(node) -> set:
    """Every name the nodes of *node*'s bodies (at any depth) read."""
    from op_coverage.onnx import walk
    return {i for _attribute, _k, body in walk.subgraphs(node) for _scope, _j, n in walk.nodes(body)
            for i in n.input if i}


def _sort_graph(g) -> bool:
    """Order *g*'s nodes so each comes after the producers of what it reads, subgraph reads included.

    Keeps the given order wherever it is already valid; returns whether anything moved.  A graph
    is sorted before its bodies (the recursion below, not a walk of op_coverage.onnx.walk, since
    the node list changes under it), and a graph left as it is (a cycle) leaves its bodies too.
    """
    from op_coverage.onnx import walk
    nodes = list(g.node)
    produced = {o for n in nodes for o in n.output if o}
    needs = []
    for n in nodes:
        reads = {i for i in n.input if i} | _reads_inside(n)
        needs.append(reads & produced - set(n.output))
    done, ordered, pending = set(), [], list(range(len(nodes)))
    while pending:
        rest = []
        for i in pending:
            if needs[i] <= done:
                ordered.append(i)
                done.update(o for o in nodes[i].output if o)
            else:
                rest.append(i)
        if len(rest) == len(pending):
            return False  # a cycle: leave it for onnx.checker to name
        pending = rest
    moved = ordered != list(range(len(nodes)))
    if moved:
        del g.node[:]
        g.node.extend(nodes[i] for i in ordered)
    for n in g.node:
        for _attribute, _k, sub in walk.subgraphs(n):
            moved |= _sort_graph(sub)
    return moved


def sort_nodes(path: Path) -> bool:
    """Re-sort the graphs of the model at *path* in place (weights untouched); True when it changed.

    onnxruntime.quantization (``EnableSubgraph``) appends the DynamicQuantizeLinear of a value an
    If/Loop body reads from the outer graph after that If/Loop, which onnx.checker rejects.
    """
    import onnx
    m = onnx.load(str(path), load_external_data=False)
    if not _sort_graph(m.graph):
        return False
    onnx.save_model(m, str(path))
    return True
