"""Live probe: ask the installed onnxruntime where each distinct op of a model would run.

For every distinct (domain, op, opset, input dtypes) in the model, a one-node model is built
(inputs typed as in the scanned model, weights replaced by graph inputs, so nothing is read)
and an ``InferenceSession`` is created for the installed execution providers:

* the preferred provider is the first installed one other than the CPU (or the CPU alone);
* with ``session.disable_cpu_ep_fallback = 1`` session creation fails unless the preferred
  provider takes the node: success means ``native``;
* otherwise a session that allows the CPU fallback tells ``host-fallback`` apart from
  ``unsupported`` (no kernel anywhere: onnxruntime raises NOT_IMPLEMENTED).

Control-flow ops (If/Loop/Scan) and calls of model-local functions are not probed alone:
their bodies are, and the op itself is judged by ``ort-cpu``'s kernel table.

Answers are kept per onnxruntime build (:mod:`op_coverage.targets.ort_live_cache`): a scan whose probes are
all known does not import onnxruntime.
"""
from __future__ import annotations

import onnx
from onnx import helper

from op_coverage.onnx.inventory import NodeInfo, all_nodes
from op_coverage.targets.ort_live_cache import ProbeCache, probe_key
from op_coverage.targets.profile import SupportProfile, Verdict

_SKIP_PROVIDERS = {"AzureExecutionProvider"}
_CONTROL_FLOW = {"If", "Loop", "Scan", "SequenceMap"}


def installed_providers(cache: ProbeCache | None = None) -> list[str]:
    """The execution providers of the installed onnxruntime (from *cache* when it knows them)."""
    return runtime_info(cache).get("providers", [])


def runtime_info(cache: ProbeCache | None = None) -> dict:
    """``{"version", "providers"}`` of the installed onnxruntime; ``{}`` when it is not installed.

    From *cache* when it holds them (no import), else from onnxruntime itself (and stored in *cache*).
    """
    if cache is not None and cache.runtime:
        return cache.runtime
    try:
        import onnxruntime as ort
    except ImportError:
        return {}
    info = {"version": ort.__version__,
            "providers": [p for p in ort.get_available_providers() if p not in _SKIP_PROVIDERS]}
    if cache is not None:
        cache.set_runtime(info)
    return info


class OrtLiveProfile(SupportProfile):
    """A profile whose answers come from onnxruntime on this machine, not from a table."""

    def __init__(self, providers: list[str] | None = None, static_fallback: SupportProfile | None = None,
                 cache: ProbeCache | None = None):
        self.disk = cache if cache is not None else ProbeCache()
        info = runtime_info(self.disk)
        version = info.get("version", "?")
        providers = providers or info.get("providers", [])
        self.providers = providers
        preferred = next((p for p in providers if p != "CPUExecutionProvider"), "CPUExecutionProvider")
        self.preferred = preferred
        self.static_fallback = static_fallback
        super().__init__(
            name="ort-live", aliases=["live", "local"], kind="live-probe",
            title=f"onnxruntime {version} on this machine ({', '.join(providers)})",
            source={"onnxruntime": version, "providers": providers, "preferred": preferred,
                    "mechanism": "one-node InferenceSession per distinct op signature; "
                                 "session.disable_cpu_ep_fallback decides native vs host-fallback"},
            notes=f"native = {preferred} takes the node; host-fallback = only the CPU EP does; "
                  "unsupported = session creation fails (no kernel).",
            entries=[], opset_kind="op-version")
        self.cache: dict = {}

    def judge(self, node: NodeInfo, expand: bool = True) -> Verdict:
        # onnxruntime itself decides (kernels, then function bodies): *expand* has nothing to add
        if node.op_type in _CONTROL_FLOW or node.function is not None:
            return self._static(node, "control flow and function calls are not probed alone")
        key = (node.domain, node.op_type, node.opset, tuple(node.input_dtypes), len(node.input_dtypes))
        if key not in self.cache:
            self.cache[key] = self._probe(node)
        return self.cache[key]

    def _probe(self, node: NodeInfo) -> Verdict:
        model = _one_node_model(node, node.attributes if node.attributes is not None else self._attributes.get(node.name))
        if model is None:
            return self._static(node, "input types unknown")
        data = model.SerializeToString()
        key = probe_key(data, self.providers)
        hit = self.disk.verdicts.get(key)
        if hit is not None:
            return Verdict(**hit)
        v = self._session_verdict(data)
        self.disk.put(key, v.to_dict())
        return v

    def flush(self) -> None:
        """Keep what this scan probed for the next one (see :mod:`op_coverage.targets.ort_live_cache`)."""
        self.disk.save()

    def _session_verdict(self, data: bytes) -> Verdict:
        prov = f"onnxruntime session on {self.preferred}"
        if self.preferred != "CPUExecutionProvider":
            ok, _ = _try_session(data, self.providers, disable_cpu_fallback=True)
            if ok:
                return Verdict("native", "", "", prov)
        ok, err = _try_session(data, self.providers, disable_cpu_fallback=False)
        if ok:
            if self.preferred == "CPUExecutionProvider":
                return Verdict("native", "", "", prov)
            return Verdict("host-fallback", f"{self.preferred} has no kernel; onnxruntime places it on the CPU", "",
                           prov)
        return Verdict("unsupported", f"onnxruntime: {err}", "", prov)

    _attributes: dict = {}

    def _static(self, node: NodeInfo, why: str) -> Verdict:
        """Answer from the ort-cpu table when a node cannot be probed on its own."""
        if self.static_fallback is None:
            return Verdict("native", "", "", f"not probed ({why}); assumed native")
        v = self.static_fallback.judge(node)
        return Verdict(v.status, v.reason, v.restriction, f"not probed ({why}); {v.provenance}", v.target_op)

    def prepare(self, model: onnx.ModelProto, nodes: list[NodeInfo]) -> None:
        """Remember each node's attributes (by scan name) so the one-node models are faithful."""
        attrs = {}
        protos = list(all_nodes(model))
        for info, proto in zip(nodes, protos):
            attrs[info.name] = list(proto.attribute)
        self._attributes = attrs


def _one_node_model(node: NodeInfo, attributes) -> onnx.ModelProto | None:
    inputs, names = [], []
    for i, (name, dt, shape) in enumerate(zip(node.inputs, node.input_dtypes, node.input_shapes)):
        if not name:
            names.append("")  # an omitted optional input stays omitted
            continue
        elem = getattr(onnx.TensorProto, dt.upper(), None) if dt else None
        if elem is None:
            return None  # type unknown: a guess could report a false "unsupported"
        dims = [d if isinstance(d, int) and d > 0 else None for d in shape] if shape is not None else None
        inputs.append(helper.make_tensor_value_info(f"in{i}", elem, dims))
        names.append(f"in{i}")
    outs = [f"out{k}" if o else "" for k, o in enumerate(node.outputs)] or ["out0"]
    n = helper.make_node(node.op_type, names, outs, domain="" if node.domain == "ai.onnx" else node.domain)
    if attributes:
        n.attribute.extend(attributes)
    g = helper.make_graph([n], "probe", inputs, [onnx.ValueInfoProto(name=o) for o in outs if o])
    opsets = [helper.make_opsetid("" if node.domain == "ai.onnx" else node.domain, node.opset or 1)]
    if node.domain != "ai.onnx":
        opsets.append(helper.make_opsetid("", 17))
    return helper.make_model(g, opset_imports=opsets, ir_version=min(onnx.IR_VERSION, 10))


def _try_session(data: bytes, providers: list[str], disable_cpu_fallback: bool) -> tuple[bool, str]:
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 4
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if disable_cpu_fallback:
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    try:
        ort.InferenceSession(data, sess_options=so, providers=providers)
        return True, ""
    except Exception as e:  # noqa: BLE001 - onnxruntime raises several unrelated types
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return False, msg[:300]
