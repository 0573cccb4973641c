"""The layout docs/architecture.md draws is the layout on disk, and imports only run downward.

Every import statement of hal, hal_backends (``backends/``) and op_coverage is read with ``ast``
(those inside functions too: a lazy import is still a dependency).  Each module belongs to the
concern it sits in (the longest name of :data:`LAYERS` that prefixes it); an import from one
concern to another must go to a lower layer.  So there is no cycle across concerns, hal never
imports op_coverage, and a new package fails here until it is given its place.
"""
import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"

def _doc_layers():
    """The layers as docs/architecture.md lists them (the block after "## Layers"), lowest first."""
    block = re.search(r"## Layers\n.*?```\n(.*?)```", DOC.read_text(), re.S)
    assert block, f"{DOC}: the layer list (a ``` block under '## Layers') is missing"
    layers = []
    for line in block.group(1).splitlines():
        names = [n.strip() for n in re.split(r"\s{2,}", line.strip())[0].split(",") if n.strip()]
        top = names[0].split(".")[0] if names else ""
        layers.append([top + n if n.startswith(".") else n for n in names])
    return [group for group in layers if group]


#: the concerns of the code, lowest layer first; a concern may import only from earlier lines
LAYERS = _doc_layers()
LAYER = {c: i for i, group in enumerate(LAYERS) for c in group}
#: imports a layer rule would flag that are not design knots: none
ALLOWED: set = set()


def _modules():
    out = {}
    for top, pkg in (("hal", "hal"), ("op_coverage", "op_coverage"), ("backends", "hal_backends"),
                     ("hal_accept", "hal_accept")):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT / top).with_suffix("")
            parts = [pkg, *rel.parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def concern(module: str) -> str:
    best = max((c for c in LAYER if module == c or module.startswith(c + ".")), key=len, default=None)
    assert best is not None, f"{module}: not in any concern of LAYERS; give its package a place there and in {DOC.name}"
    return best


def _package(module: str, path: Path) -> str:
    """The package ``module`` sits in (itself for an ``__init__.py``)."""
    return module if path.name == "__init__.py" else module.rsplit(".", 1)[0]


def _from_module(package: str, node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` in ``package`` reads from (relative levels resolved)."""
    if not node.level:
        return node.module or ""
    base = package.split(".")
    base = base[:len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(module: str, path: Path):
    """``(lineno, imported module)`` for every import of hal / hal_backends / op_coverage in the file."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = _from_module(_package(module, path), node)
            names = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in MODULES else mod for a in node.names]
        else:
            continue
        for name in names:
            if name.split(".")[0] in ("hal", "hal_backends", "op_coverage"):
                while name not in MODULES and name not in LAYER and "." in name:
                    name = name.rsplit(".", 1)[0]
                yield node.lineno, name


def _edges():
    for module, path in MODULES.items():
        if module.endswith(".__main__"):
            continue  # an entry point: the command line, whatever folder it sits in
        for line, target in _targets(module, path):
            a, b = concern(module), concern(target)
            if a != b:
                yield f"{path.relative_to(ROOT)}:{line}", module, target, a, b


def test_every_module_has_a_concern():
    for module in MODULES:
        concern(module)


def test_imports_run_downward_only():
    upward = [f"{where}: {m} imports {t} ({a} is layer {LAYER[a]}, {b} layer {LAYER[b]})"
              for where, m, t, a, b in _edges() if LAYER[b] >= LAYER[a] and (m, t) not in ALLOWED]
    assert not upward, "imports that run sideways or upward (move the code, or the concern):\n" + "\n".join(upward)


def test_hal_never_imports_op_coverage():
    # hal and its plugins stand alone; hal_accept sits above both
    bad = [f"{w}: {m} imports {t}" for w, m, t, a, b in _edges()
           if m.split(".")[0] in ("hal", "hal_backends") and t.startswith("op_coverage")]
    assert not bad, "\n".join(bad)


def _doc_tree():
    text = DOC.read_text()
    block = re.search(r"```text\n(.*?)```", text, re.S)
    assert block, f"{DOC}: the tree (a ```text block) is missing at the top"
    folders = []
    for line in block.group(1).splitlines():
        m = re.match(r"^([\w./-]+/)\s", line.strip() + " ")
        if m:
            folders.append(m.group(1).rstrip("/"))
    return folders


def test_every_folder_the_map_names_exists():
    missing = [f for f in _doc_tree() if not (ROOT / f).is_dir()]
    assert not missing, f"docs/architecture.md names folders that do not exist: {missing}"


def test_every_package_is_on_the_map():
    named = set(_doc_tree())
    packages = sorted({str(p.parent.relative_to(ROOT)) for top in ("hal", "op_coverage", "backends", "hal_accept")
                       for p in (ROOT / top).rglob("__init__.py")})
    missing = [p for p in packages if p not in named]
    assert not missing, f"packages docs/architecture.md does not name (one line per folder): {missing}"


def test_packaging_lists_every_package():
    text = (ROOT / "pyproject.toml").read_text()
    listed = set(re.findall(r'"([\w.]+)"', re.search(r"packages = \[(.*?)\]", text, re.S).group(1)))
    want = {".".join(("hal_backends",) + p.parent.relative_to(ROOT / "backends").parts) if p.parts[len(ROOT.parts)] == "backends"
            else ".".join(p.parent.relative_to(ROOT).parts)
            for top in ("hal", "op_coverage", "backends", "hal_accept") for p in (ROOT / top).rglob("__init__.py")}
    assert want == listed, f"pyproject.toml packages: missing {sorted(want - listed)}, extra {sorted(listed - want)}"


@pytest.mark.parametrize("layer", range(len(LAYERS)))
def test_every_concern_of_the_layers_exists(layer):
    for c in LAYERS[layer]:
        assert c in MODULES or any(m.startswith(c + ".") for m in MODULES) or c == "hal._C", c


def _private(parts):
    """``(owner package, private part)`` of a dotted name with a ``_private`` part (not ``__dunder__``), else None."""
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i]), part
    return None


def _private_imports():
    """``(where, importer, what)`` for each import of a private module or name from outside the package
    that owns it: ``hal.ops._dispatch`` belongs to ``hal.ops``, ``_minor`` of ``hal.op_support.torch_profile``
    to ``hal.op_support``.  A package's own modules may use its private parts; nothing else may."""
    for module, path in MODULES.items():
        package = _package(module, path)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                wanted = [a.name.split(".") for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                wanted = [_from_module(package, node).split(".") + [a.name] for a in node.names]
            else:
                continue
            for parts in wanted:
                if parts[0] not in ("hal", "hal_backends", "op_coverage"):
                    continue
                hit = _private(parts)
                if hit is None:
                    continue
                owner = hit[0]
                if owner in MODULES and MODULES[owner].name != "__init__.py":  # a private name of a module
                    owner = owner.rsplit(".", 1)[0]                             # belongs to its package
                if module != owner and not module.startswith(owner + "."):
                    yield f"{path.relative_to(ROOT)}:{node.lineno}", module, ".".join(parts)


def test_no_private_import_across_packages():
    # vendors copy backends/ and other packages grow on hal's public names: what they import must not be
    # free to change (make it public where the package means it to be used, or move the code)
    bad = [f"{where}: {m} imports {what}" for where, m, what in _private_imports()]
    assert not bad, "private names imported from outside their package:\n" + "\n".join(bad)


#: the private torch names hal and its reference plugins use, each because no public API on the window's oldest
#: torch (2.4) does the same (docs/torch-window.md); a new one fails :func:`test_private_torch_names_are_the_listed_ones`
_OPTIMIZER_KERNELS = "the fused optimizer kernels torch.optim itself calls (hal.ops' fused steps compare with them)"
_REGISTRY = "the operator registry: no public API lists operators, schemas or the kernels registered per key"
_DEVICE_PLUGIN = "how an out-of-tree device registers with torch (what torch's own PrivateUse1 tutorial uses)"
_COMPILE = "torch.compile's internals a device plugin hooks into (no public registration API on 2.4)"
PRIVATE_TORCH_NAMES = {
    "torch._C": "DispatchKey, TensorBase, Generator: types that torch re-exports nowhere public",
    "torch._C._DisableAutocast": "autocast off for every device type at once in the CUDA autocast policy (torch.autocast takes one type)",
    "torch._C._are_functorch_transforms_active": "hal.ops' entry takes the composite route under vmap/grad",
    "torch._C._len_torch_dispatch_stack": "hal.ops' entry takes the composite route under a dispatch mode",
    "torch._C._cuda_getDriverVersion": "the CUDA driver version without initialising CUDA (hal doctor)",
    "torch._C._current_autograd_node": "the backward node running: where an op or a gradient bucket comes from",
    "torch._C._current_graph_task_id": "whether a backward pass is running (communication time per step)",
    "torch._C._dispatch_has_computed_kernel_for_dispatch_key": _REGISTRY,
    "torch._C._dispatch_has_kernel_for_dispatch_key": _REGISTRY,
    "torch._C._dispatch_key_for_device": "the dispatch key of a device type, for a device's operator profile",
    "torch._C._dispatch_get_all_op_names": _REGISTRY,
    "torch._C._jit_get_all_schemas": _REGISTRY,
    "torch._ops": "OpOverload, the type of an operator handed to a fallback (annotations and isinstance)",
    "torch._C._distributed_c10d": "AllgatherOptions, which torch.distributed does not re-export",
    "torch._C._get_accelerator": "the accelerator torch was built for, on 2.4-2.5 (before torch.accelerator)",
    "torch._C._get_privateuse1_backend_name": _DEVICE_PLUGIN,
    "torch._register_device_module": _DEVICE_PLUGIN,
    "torch._decomp": "torch's decomposition table, the compositions of a missing operator",
    "torch._prims": "rng_prims: the RNG operators of compiled graphs, served on the emulator",
    "torch._higher_order_ops": _COMPILE,
    "torch._inductor": _COMPILE,
    "torch._dynamo": _COMPILE,
    "torch._foreach_add": _OPTIMIZER_KERNELS, "torch._foreach_add_": _OPTIMIZER_KERNELS,
    "torch._foreach_addcdiv_": _OPTIMIZER_KERNELS, "torch._foreach_addcmul_": _OPTIMIZER_KERNELS,
    "torch._foreach_div_": _OPTIMIZER_KERNELS, "torch._foreach_lerp_": _OPTIMIZER_KERNELS,
    "torch._foreach_mul_": _OPTIMIZER_KERNELS, "torch._foreach_neg": _OPTIMIZER_KERNELS,
    "torch._foreach_sqrt": _OPTIMIZER_KERNELS, "torch._fused_adam_": _OPTIMIZER_KERNELS,
    "torch._fused_adamw_": _OPTIMIZER_KERNELS,
    "torch._has_compatible_shallow_copy_type": "whether Module.to can keep Parameter objects across devices",
    "torch._tensor_classes": "the legacy tensor types (torch.FloatTensor ...) whose pickler the emulator replaces",
    "torch.distributed._functional_collectives": "the functional collectives DTensor and torch.compile use",
    "torch.distributed._coalescing_manager": "the coalesced collectives DDP issues, which the CCL check replays",
    "torch.distributed.distributed_c10d._world": "the process groups torch knows (the CCL check names its own)",
    "torch.distributed.distributed_c10d._get_default_store": "the job's store, for straggler and group facts",
    "torch.distributed.group.WORLD._get_backend": "the backend object behind a group (a Python CCL's own state)",
    "torch.distributed.ProcessGroupGloo._Options": "a private 2-rank gloo group of its own (loopback device, "
                                                   "_timeout, _reduce_scatter_base) to test whether gloo averages",
    "torch.distributed.distributed_c10d._resolve_process_group": "a group given by name, as funcol gives it",
    "torch.jit._builtins._get_builtin_table": "torch functions by builtin name: those with a device argument",
    "torch.ops.aten._fused_rmsnorm_forward": "the fused rms_norm kernel torch_musa registers (the MUSA plugin)",
    "torch.storage._StorageBase": "the untyped storage base whose .cuda() the redirection maps",
    "torch.utils._device": "DeviceContext: `with torch.device('cuda'):` is redirected at its constructor",
    "torch.utils._device._device_constructors": "the factories `with torch.device(...)` applies to",
    "torch.utils._python_dispatch": "TorchDispatchMode, to see the aten ops a script sends to the device",
}


def _private_torch_names():
    """``{dotted name: [file:line, ...]}``: every private torch name in hal/ and backends/, read with ``ast``
    (attribute chains, imports, ``getattr(torch..., "_x")``), through a file's aliases of torch's names
    (``import torch.distributed as dist``, ``from torch.distributed import X``, ``gloo = getattr(dist, "X")``);
    a name is cut after its last private part."""
    def chain(node):
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        return parts[::-1] and ([node.id] + parts[::-1]) if isinstance(node, ast.Name) else None

    def getattr_parts(node):
        """``getattr(<chain>, "name"[, default])`` -> the chain and the name, else None."""
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)):
            base = chain(node.args[0]) if isinstance(node.args[0], ast.Attribute) else (
                [node.args[0].id] if isinstance(node.args[0], ast.Name) else None)
            return base + [node.args[1].value] if base else None
        return None

    def aliases_of(tree):
        out = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                out.update({a.asname: a.name.split(".") for a in node.names if a.asname})
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                out.update({a.asname or a.name: node.module.split(".") + [a.name] for a in node.names})
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                value = getattr_parts(node.value) or (chain(node.value) if isinstance(node.value, ast.Attribute) else None)
                if value:
                    out[node.targets[0].id] = value
        return out

    def name(parts):
        for _ in range(3):  # an alias of an alias (dist -> torch.distributed, gloo -> dist.ProcessGroupGloo)
            if parts and parts[0] in aliases and aliases[parts[0]][0] != parts[0]:
                parts = aliases[parts[0]] + parts[1:]
        if not parts or parts[0] != "torch" or (parts[1:2] == ["ops"] and parts[2:3] != ["aten"]):
            return None  # torch.ops.<library>: another package's operators (vllm's _C), not torch's
        private = [i for i, p in enumerate(parts) if p.startswith("_") and not p.startswith("_hal")
                   and not (p.startswith("__") and p.endswith("__"))]
        return ".".join(parts[:private[-1] + 1]) if private else None

    found = {}
    for top in ("hal", "backends"):
        for path in sorted((ROOT / top).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            aliases = aliases_of(tree)
            inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
            for node in ast.walk(tree):
                hits = []
                if isinstance(node, ast.Import):
                    hits = [a.name.split(".") for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    hits = [node.module.split(".") + [a.name] for a in node.names]
                elif isinstance(node, ast.Attribute) and id(node) not in inner:
                    hits = [chain(node)]
                elif getattr_parts(node):
                    hits = [getattr_parts(node)]
                for parts in hits:
                    n = name(parts)
                    if n:
                        found.setdefault(n, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_private_torch_names_are_the_listed_ones():
    # each private torch name is a place where the next torch release may break hal silently: a new one
    # needs a reason no public API on torch 2.4 serves (then list it above)
    found = _private_torch_names()
    new = {n: sites for n, sites in found.items() if n not in PRIVATE_TORCH_NAMES}
    assert not new, ("private torch names not in PRIVATE_TORCH_NAMES (use a public API present on torch 2.4, or "
                     "list the name with the reason none serves):\n" + "\n".join(f"{n}: {s}" for n, s in new.items()))
    gone = sorted(set(PRIVATE_TORCH_NAMES) - set(found))
    assert not gone, f"no longer used, take them off PRIVATE_TORCH_NAMES: {gone}"
