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


def _pre_process(src: Path, dst: Path, external: bool, symbolic: bool) -> str | None:
    """One ``quant_pre_process`` call into *dst*; ``None`` when it worked, else why not."""
    from onnxruntime.quantization.shape_inference import quant_pre_process
    try:
        with _quiet(), torch_free(), _scratch_cwd(dst):
            quant_pre_process(str(src), str(dst), skip_symbolic_shape=not symbolic, save_as_external_data=external,
                              all_tensors_to_one_file=True,
                              external_data_location=dst.name + ".data" if external else None)
    except Exception as e:  # noqa: BLE001 - symbolic shape inference refuses some models (subgraphs, odd ops)
        return f"onnxruntime's quant_pre_process failed ({str(e).splitlines()[0][:200] if str(e) else type(e).__name__})"
    return None


def untyped_values(path: Path) -> list[str]:
    """Node outputs of the model at *path* (bodies included) that carry no element type after shape inference.

    onnxruntime's quantizers read only the element type of a value (``get_tensor_type``,
    ``is_float_tensor``) and, when calibrating, its rank; a value without a type is never quantized.
    """
    import onnx

    from op_coverage.onnx import walk
    m = onnx.load(str(path), load_external_data=False)
    typed, outputs = set(), []

    def visit(g):
        typed.update(t.name for t in g.initializer)
        typed.update(v.name for v in (*g.input, *g.output, *g.value_info) if v.type.tensor_type.elem_type
                     or not v.type.HasField("tensor_type"))
        for n in g.node:
            outputs.extend(o for o in n.output if o)
            for _attribute, _k, body in walk.subgraphs(n):
                visit(body)
    visit(m.graph)
    return [o for o in outputs if o not in typed]


def pre_process(src: Path, dst: Path, external: bool) -> str | None:
    """onnxruntime's ``quant_pre_process`` (basic optimisation, shape inference) into *dst*.

    Symbolic shape inference (sympy, most of the step's time) runs only when onnx's own shape
    inference leaves a node output without an element type (contrib ops, for instance): the
    quantizers read nothing else of what it adds but ranks and dimensions.  When it fails, the model
    pre-processed without it is kept.

    :returns: ``None`` when it worked, else why not (the caller quantizes the model as it is).
    """
    src, dst = Path(src).resolve(), Path(dst).resolve()  # before the scratch folder becomes the current one
    why = _pre_process(src, dst, external, symbolic=False)
    if why is not None or not untyped_values(dst):
        return why
    (dst.parent / "symbolic").mkdir(exist_ok=True)
    full = dst.parent / "symbolic" / dst.name  # the same name: external data keeps its location
    if _pre_process(src, full, external, symbolic=True) is None:
        os.replace(full, dst)
        if external:
            os.replace(full.with_name(dst.name + ".data"), dst.with_name(dst.name + ".data"))
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
