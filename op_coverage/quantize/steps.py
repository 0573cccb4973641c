"""The steps of ``op_coverage quantize``, each callable alone: load, make_feeds, choose, check, measure,
gate, benchmark, write.

Each step takes the result of the one before (which carries the options and what came earlier)
and returns a small record; :func:`op_coverage.quantize.quantize` runs them in this order and
records each result in a :class:`~op_coverage.quantize.QuantizeReport`.  A caller that wants only
some of them (the numbers of a quantization without writing it, say) runs them itself::

    source = load("model.onnx", "ort-cpu", QuantizeOptions(runs=0))
    with tempfile.TemporaryDirectory() as work:
        checked = check(choose(make_feeds(source), work))
        verdict = gate(measure(checked))

Nothing is written outside the work folder but by :func:`write`.  The steps raise the
:class:`~op_coverage.errors.ScanError` subclasses ``quantize`` documents, without a ``.report``.
"""
from __future__ import annotations

import errno
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import onnx

from op_coverage.errors import (ModelNotFound, NothingQuantized, NotAvailable, OutputNotWritable,
                                QuantizeCheckFailed, UnknownTarget)
from op_coverage.quantize.census import _all_nodes, _census, _labels, _rescan, quantized_node_names
from op_coverage.quantize.options import Gates, QuantizeOptions

if TYPE_CHECKING:
    from op_coverage.onnx.load import LoadedModel
    from op_coverage.quantize.choice import Choice
    from op_coverage.quantize.metrics import OutputAccuracy
    from op_coverage.targets.profile import SupportProfile

#: the name :func:`check` saves the quantized model under when :func:`load` was given no output
CHECKED_NAME = "quantized.onnx"


@dataclass(frozen=True)
class Source:
    """The float model and the target, as :func:`load` found them."""

    path: Path
    loaded: LoadedModel          # the model's structure (weights not read) and its files
    profile: SupportProfile      # the target
    options: QuantizeOptions
    output: Path | None = None   # where :func:`write` puts the result, checked already; None: not decided

    @property
    def model(self) -> onnx.ModelProto:
        """The float model's structure (external weights not read)."""
        return self.loaded.model

    @property
    def external(self) -> bool:
        """Whether weights go to an external-data file: the model has one, or is over 1.8 GB."""
        return bool(self.loaded.external_files) or self.loaded.file_bytes > 1_800_000_000


def _output_path(src: Path, output) -> Path:
    """*output* as a Path, after checking it is not the model and its folder exists."""
    out = Path(output)
    if out.resolve() == src.resolve():
        raise ModelNotFound(f"-o {out}: is the input model; write the quantized model to another file")
    if not out.parent.is_dir():
        raise OutputNotWritable(f"-o {out}: folder {out.parent} does not exist; create it or choose another path")
    return out


def load(path, target: str, options: QuantizeOptions | None = None, *, output=None) -> Source:
    """Read the float model at *path* (structure only) and resolve *target* (a name or an alias).

    :param output: where :func:`write` will put the result, checked now (not the model itself, an
        existing folder) so that a long run does not end in that error; ``None`` to decide later.
    :raises ScanError: the model is missing or bad (exit codes of ``scan``); :class:`UnknownTarget`
        unless *target* names exactly one target; :class:`NotAvailable` for an ``exclude`` name
        that is no node of the model.
    """
    from op_coverage.onnx.load import load_for_scan
    from op_coverage.targets.catalog import load_targets
    options = options if options is not None else QuantizeOptions()
    src = Path(path)
    loaded = load_for_scan(src)  # safety: missing, not ONNX, truncated, external-data paths, opsets
    chosen = load_targets(list(options.profiles)).resolve_names([target])
    if len(chosen) != 1:
        raise UnknownTarget(f"--target {target!r} names {len(chosen)} targets; quantize needs exactly one")
    out = _output_path(src, output) if output is not None else None
    names = {n.name for n in _all_nodes(loaded.model)}
    unknown = [x for x in options.exclude if x not in names]
    if unknown:
        raise NotAvailable(f"--exclude {', '.join(unknown)}: no node of that name in {src.name}; node names are "
                           f"in 'op_coverage scan {src} --json' (models[].nodes) or Netron")
    return Source(src, loaded, chosen[0], options, out)


@dataclass(frozen=True)
class Feeds:
    """What the models are run on, from :func:`make_feeds`."""

    source: Source
    inputs: dict                 # input name -> array: the accuracy comparison and the latency runs
    calibration: list            # [input name -> array] samples for calibrated formats
    calibration_source: str      # the ``calibration`` option, or "generated"


def make_feeds(source: Source) -> Feeds:
    """Read ``inputs`` and ``calibration`` (or generate them from ``seed`` and ``dims``).

    :raises BadInputs: (exit 18) a file is missing or does not fit the model's inputs.
    """
    from op_coverage.quantize.calibration import generated_calibration, load_calibration
    from op_coverage.rewrite.verify import generate_inputs, load_inputs
    o, model = source.options, source.model
    inputs = load_inputs(list(o.inputs), model) if o.inputs else generate_inputs(model, o.seed, o.dim_values)
    given = load_calibration(o.calibration, model) if o.calibration else None
    cal = given or generated_calibration(model, o.seed, o.dim_values)
    return Feeds(source, inputs, cal, o.calibration if given else "generated")


@dataclass(frozen=True)
class Chosen:
    """The quantized model :func:`choose` picked (a file in its work folder), and how."""

    feeds: Feeds
    workdir: Path
    choice: Choice               # format, variant, op types, what stayed float and why, every try
    formats: dict                # :func:`op_coverage.quantize.choice.formats` (data/quantize_formats.json)
    pre_process: str = "ok"      # or why onnxruntime's quant_pre_process failed (the model was quantized as given)
    calibration_used: dict | None = None  # {"source", "samples", "shapes"} when the format is calibrated
    notes: tuple = ()            # what the report says about the choice

    @property
    def source(self) -> Source:
        return self.feeds.source

    @property
    def format_facts(self) -> dict:
        """The chosen format's entry of ``data/quantize_formats.json``."""
        return self.formats["formats"][self.choice.format]


def _nothing_quantized(chosen: Chosen) -> NothingQuantized:
    tried = chosen.choice.tried
    last = {t["format"]: t["outcome"] for t in tried}
    last.update({t["format"]: t["outcome"] for t in tried  # what the target lacked, if anything
                 if not t["outcome"].startswith("quantized nothing")})
    lacking = "; ".join(f"{k}: {v[:200]}" for k, v in last.items())
    src, profile = chosen.source.path, chosen.source.profile
    e = NothingQuantized(f"{src.name}: no INT8 form {profile.name} runs natively ({lacking}); the model "
                         f"stays float, nothing written; try another --mode, or a profile with the "
                         f"quantized ops (--profile)")
    e.chosen = chosen
    return e


def choose(feeds: Feeds, workdir) -> Chosen:
    """Quantize the model in each format of the mode and keep the smallest result the target runs natively.

    onnxruntime's ``quant_pre_process`` runs first; every try, and onnxruntime's own default call
    when it can be a candidate (neither ``exclude`` nor ``per_channel``), is a file in *workdir*
    (which the caller makes and removes; beside the output, so that :func:`write` renames).  See
    :func:`op_coverage.quantize.choice.choose` for the order of the tries.

    :raises NothingQuantized: (exit 7) the target runs no INT8 form of the model's ops; the
        exception's ``.chosen`` holds every try.
    """
    from op_coverage.quantize.baseline import CALLS, default_quantize
    from op_coverage.quantize.calibration import describe
    from op_coverage.quantize.choice import choose as try_formats, formats, not_native, scan_nodes
    from op_coverage.quantize.metrics import model_bytes
    from op_coverage.quantize.ort import pre_process, quantize_once
    from op_coverage.scan import scan_model

    source, o, workdir = feeds.source, feeds.source.options, Path(workdir)
    src, profile, external = source.path, source.profile, source.external
    facts = formats()
    opset = next((i.version for i in source.model.opset_import if i.domain in ("", "ai.onnx")), 0)
    # the float model's scan, on the structure already read (a second read of the file costs as much)
    before = not_native(src, profile, scan_nodes(src, profile, scan_model(source.loaded, [profile])))
    notes = []
    why = pre_process(src, workdir / "pre.onnx", external)
    if why:
        notes.append(f"{why}; quantized the model as it is")
    base = src if why else workdir / "pre.onnx"
    tries = iter(range(1000))

    def trial(name, fmt, variant, op_types, exclude_nodes=()):
        pc = o.per_channel
        if pc and name == "qdq" and opset < fmt.get("per_channel_min_opset", 0):
            pc = False
            note = (f"--per-channel: QDQ per-channel needs opset >= {fmt['per_channel_min_opset']} (the axis "
                    f"attribute); the model has opset {opset}, so weights are quantized per tensor")
            if note not in notes:
                notes.append(note)
        dst = workdir / f"try{next(tries)}.onnx"
        quantize_once(base, dst, fmt, variant, op_types, exclude=[*o.exclude, *exclude_nodes], per_channel=pc,
                      calibration=feeds.calibration if fmt["calibration"] else None, external=external)
        return dst

    def default():
        dst = workdir / "onnxruntime-default.onnx"
        default_quantize(src, dst, o.mode, feeds.calibration, external)
        return dst

    own_choices = bool(o.exclude) or o.per_channel  # onnxruntime's default call would override them
    choice = try_formats(o.mode, onnx.load(str(base), load_external_data=False), profile, before, trial, facts,
                         None if own_choices else default)
    pre = why or "ok"
    if choice.format is None:
        raise _nothing_quantized(Chosen(feeds, workdir, choice, facts, pre, notes=tuple(notes)))
    calibrated = facts["formats"][choice.format]["calibration"]
    if choice.default_won:
        ours = min(t["bytes"] for t in choice.tried if "bytes" in t and "call" not in t)
        what = "quantizing the pre-processed model" if not why else "the best try"
        notes.append(f"onnxruntime's own {CALLS[o.mode]} on the model as given made a smaller file "
                     f"({model_bytes(choice.path)} bytes) than {what} ({ours} bytes), and "
                     f"{profile.name} runs it natively: wrote that one")
    if calibrated:
        if feeds.calibration_source == "generated":
            notes.append(f"calibrated on {len(feeds.calibration)} generated random inputs (seed {o.seed + 1}+): "
                         "the activation ranges fit random data; pass --calibration with real inputs for a "
                         "model to deploy")
        if o.mode == "dynamic":
            notes.append(f"{profile.name} runs no dynamic integer form; used {choice.format} "
                         "(static scales from calibration) instead")
    return Chosen(feeds, workdir, choice, facts, pre, notes=tuple(notes),
                  calibration_used={"source": feeds.calibration_source, **describe(feeds.calibration)}
                  if calibrated else None)


@dataclass(frozen=True)
class Checked:
    """The chosen model saved and checked by :func:`check`: a file in the work folder, not yet written."""

    chosen: Chosen
    path: Path                   # the saved model, named as the output (its external data is named for it)
    model: onnx.ModelProto       # the quantized model, weights loaded
    external_data: str | None    # the external-data file beside *path*, or None
    quantized_nodes: dict        # float op type -> nodes quantized
    kept_float: list             # [{"node", "op_type", "reason"}] of the candidate nodes left float
    size: dict                   # {"float_bytes", "quantized_bytes", "ratio"}: model and data files
    rescan: dict                 # the target on the quantized model: nodes, coverage, nodes_by_status, not_native
    introduced: dict             # op label -> nodes the quantized model has and the float model had not

    @property
    def source(self) -> Source:
        return self.chosen.source


def check(chosen: Chosen) -> Checked:
    """Save the chosen model in the work folder and check it: ``onnx.checker`` (full check, with shape
    inference), which nodes it quantized and kept float, its size, and the target's rescan of it.

    The file is named as the output given to :func:`load` (else :data:`CHECKED_NAME`), so that its
    external data, when the model has any, is named for the output too.

    :raises QuantizeCheckFailed: (exit 6) the checker rejects the model; :class:`OutputNotWritable`.
    """
    from op_coverage.quantize.metrics import model_bytes
    from op_coverage.rewrite import save_checked
    source, choice = chosen.source, chosen.choice
    qmodel = onnx.load(str(choice.path), load_external_data=True)
    (chosen.workdir / "checked").mkdir(exist_ok=True)  # apart from the tries, whatever the output's name
    final = chosen.workdir / "checked" / (source.output.name if source.output is not None else CHECKED_NAME)
    external_data = save_checked(
        qmodel, final, source.external, source.output if source.output is not None else final,
        lambda why: QuantizeCheckFailed(f"quantized model fails onnx.checker ({why}); nothing written; "
                                        "try --exclude for the node it names, or --mode"))
    quantized, kept = _census(qmodel, chosen.format_facts, choice.kept_float, source.options.exclude, choice.kept_nodes)
    fb, qb = model_bytes(source.path), model_bytes(final)
    rescan, introduced = _rescan(final, source.profile, _labels(source.model), choice.scan)
    return Checked(chosen, final, qmodel, external_data, quantized, kept,
                   {"float_bytes": fb, "quantized_bytes": qb, "ratio": round(qb / fb, 4) if fb else None},
                   rescan, introduced)


@dataclass(frozen=True)
class Measurement:
    """How far the checked model's outputs are from the float model's, from :func:`measure`."""

    checked: Checked
    outputs: list[OutputAccuracy]  # one per output of the float model
    float_session: object        # the onnxruntime sessions (CPU, one thread) both models ran in
    session: object

    @property
    def source(self) -> Source:
        return self.checked.source

    def to_dict(self, verdict: Verdict | None = None) -> dict:
        """The report's ``accuracy``: the inputs, per-output figures and, given a *verdict*, the gates."""
        o, feeds = self.source.options, self.checked.chosen.feeds
        doc = {"inputs": ", ".join(o.inputs) if o.inputs else "generated", "seed": None if o.inputs else o.seed,
               "shapes": {k: list(v.shape) for k, v in feeds.inputs.items()},
               "outputs": [x.to_dict() for x in self.outputs]}
        if verdict is not None:
            doc["gates"] = verdict.to_dict()
        return doc


def measure(checked: Checked) -> Measurement:
    """Load the float and the quantized model in onnxruntime (CPU) and compare their outputs on the feeds:
    max abs and relative error, cosine similarity, top-1 agreement, per output.

    :raises QuantizeCheckFailed: (exit 6) onnxruntime cannot load or run either model.
    """
    from op_coverage.quantize.metrics import compare_outputs, session
    source = checked.source
    try:
        fs, qs = session(source.path), session(checked.path)
    except Exception as e:  # noqa: BLE001 - onnxruntime raises its own types
        raise QuantizeCheckFailed(f"onnxruntime cannot load the float or the quantized model "
                                  f"({str(e).splitlines()[0][:300]}); nothing written") from None
    try:
        outs = compare_outputs(fs, qs, checked.chosen.feeds.inputs)
    except Exception as e:  # noqa: BLE001
        raise QuantizeCheckFailed(f"onnxruntime cannot run the models on the "
                                  f"{'given' if source.options.inputs else 'generated'} inputs "
                                  f"({str(e).splitlines()[0][:300]}); nothing written; pass --inputs "
                                  "with valid values") from None
    return Measurement(checked, outs, fs, qs)


@dataclass(frozen=True)
class Verdict:
    """Whether a measurement passes the gates, from :func:`gate`."""

    gates: Gates
    failed: tuple = ()           # one line per failed gate and output

    @property
    def ok(self) -> bool:
        return not self.failed

    def to_dict(self) -> dict:
        return {"max_error": self.gates.max_error, "min_cosine": self.gates.min_cosine, "ok": self.ok,
                "failed": list(self.failed)}


def gate(measurement: Measurement, gates: Gates | None = None) -> Verdict:
    """Judge *measurement* against *gates* (default: the options' ``gates``); runs nothing."""
    gates = gates if gates is not None else measurement.source.options.gates
    return Verdict(gates, tuple(gates.failures(measurement.outputs)))


@dataclass(frozen=True)
class Benchmark:
    """Latency and onnxruntime's own result, from :func:`benchmark`."""

    latency: dict | None         # {"ratio", "min", "max", "float_ms", "quantized_ms", ...}; None with runs 0
    baseline: dict | None        # onnxruntime's default call measured the same way; None without compare


def benchmark(measurement: Measurement) -> Benchmark:
    """Time the quantized model against the float one (``runs`` interleaved pairs, ``repeats`` times, one
    thread) and, with ``compare``, measure onnxruntime's own default call on the same model the same way
    (made now unless :func:`choose` made it as a candidate), with the nodes it quantizes that stay float here.
    """
    from op_coverage.quantize.baseline import measure_baseline
    from op_coverage.quantize.metrics import latency
    checked, o = measurement.checked, measurement.source.options
    chosen, source = checked.chosen, checked.source
    fs, qs, inputs = measurement.float_session, measurement.session, chosen.feeds.inputs
    mine = baseline = None  # mine: the latency, when timed with onnxruntime's result (the float runs shared)
    if o.compare:
        bpath = chosen.workdir / "onnxruntime-default.onnx"
        made = chosen.choice.default_error or (chosen.choice.default_path is not None)
        baseline, mine = measure_baseline(source.path, bpath, o.mode, chosen.feeds.calibration, source.external,
                                          fs, inputs, checked.size["quantized_bytes"], o.runs, o.repeats,
                                          made=made, same=(checked.path, measurement.outputs),
                                          ours=qs if o.runs > 0 else None)
        if "error" not in baseline and bpath.is_file():
            theirs = quantized_node_names(onnx.load(str(bpath), load_external_data=False),
                                          chosen.formats["formats"]["integer-dynamic" if o.mode == "dynamic"
                                                                    else "qdq"])
            ours = quantized_node_names(checked.model, chosen.format_facts)
            ours |= {x.split("/MatMulAddFusion")[0] for x in ours}  # pre-processing fused MatMul + Add
            names = {n.name: n.op_type for n in _all_nodes(source.model) if n.name}
            baseline["float_here"] = [{"node": n, "op_type": names[n]} for n in sorted(theirs - ours) if n in names]
    if o.runs > 0 and mine is None:
        mine = latency(fs, qs, inputs, runs=o.runs, repeats=o.repeats)
    return Benchmark(mine if o.runs > 0 else None, baseline)


def write(checked: Checked, output=None) -> Path:
    """Move the checked model (and its external-data file, first) to *output*: fsync, the mode a plain
    ``open()`` gives, rename, fsync the folder; readers see the old file or the whole new one.

    :param output: default: the output given to :func:`load`.  With external data its file name must
        be the one the model was checked under (the model names its data file).
    :raises OutputNotWritable: (exit 17) the output's folder is missing or not writable, or on another file
        system than the work folder.
    """
    from hal.util.io import move_into_place
    source = checked.source
    out = _output_path(source.path, output) if output is not None else source.output
    if out is None:
        raise ValueError("write(checked): no output; pass write(checked, output) or load(..., output=...)")
    if checked.external_data and out.name != checked.path.name:
        raise ValueError(f"write(checked, {str(out)!r}): the model names its data file {checked.external_data!r}; "
                         f"write it as {checked.path.name!r}, or pass output= to load() before check()")
    try:
        if checked.external_data:
            move_into_place(checked.path.parent / checked.external_data, out.parent / checked.external_data)
        move_into_place(checked.path, out)
    except OSError as e:
        if e.errno == errno.EXDEV:
            raise OutputNotWritable(f"-o {out}: the work folder {checked.chosen.workdir} is on another file system, "
                                    "so the model cannot be renamed into place; give choose() a folder beside the "
                                    f"output (tempfile.TemporaryDirectory(dir={str(out.parent)!r}))") from None
        raise OutputNotWritable(f"-o {out}: cannot write ({e}); choose a writable folder") from None
    return out
