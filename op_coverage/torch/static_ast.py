"""The AST pass behind ``op_coverage scan train.py --static``: one parsed file in, raw findings out.

Nothing here imports or runs the scanned code.  Names are resolved through the file's own
imports (``import torch.cuda as tc`` makes ``tc.graph`` mean ``torch.cuda.graph``); a rule of
``op_coverage/data/torch_static_rules.json`` matches a resolved name by its longest prefix, or
through a *detector* (a method below) for forms that are not a name: comparisons of a tensor's
device with CUDA, environment writes, ``init_process_group`` forms, DataLoader options.
The facts (what each rule means and how to fix it) stay in the data file; this module only
finds the places.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Tuple

#: bases of ``X.device`` that usually hold a configured torch.device or a string, not a tensor
CONFIG_BASES = frozenset({"self", "cls", "args", "opt", "opts", "cfg", "config", "conf", "hparams", "hp", "flags",
                          "FLAGS", "params", "settings", "trainer", "accelerator", "options", "training_args"})
#: calls whose string arguments are commands (for the nvidia-smi detector)
COMMAND_CALLS = ("subprocess.", "os.system", "os.popen", "os.exec", "os.spawn", "commands.", "sh.")
ENVIRON = ("os.environ",)
TORCHRUN_VARS = frozenset({"LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"})
DATALOADER = ("torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader")
INIT_PG = ("torch.distributed.init_process_group", "torch.distributed.distributed_c10d.init_process_group",
           "torch.distributed.new_group")
JIT_SCRIPT = ("torch.jit.script", "torch.jit.script_method")


@dataclass
class Hit:
    """One place a rule matched: the rule id, where, and text that refines the rule's own."""

    rule: str
    line: int
    col: int
    what: Optional[str] = None  # replaces the rule's `what` when set
    fix: Optional[str] = None   # replaces the rule's `fix` when set
    level: Optional[str] = None  # replaces the rule's `level` when set


class RuleIndex:
    """The rules of the data file arranged for matching: name prefixes (longest first) and detectors."""

    def __init__(self, data: dict):
        self.by_id = {r["id"]: r for r in data["rules"]}
        self.prefixes: List[Tuple[str, dict]] = sorted(
            ((n, r) for r in data["rules"] for n in r.get("names", ())), key=lambda p: -len(p[0]))
        #: ``torch.cuda.<sub>.<name>`` is judged as ``torch.cuda.<name>`` for these submodules: under the
        #: shim their names are the same objects as torch.cuda's, with the same replacements
        self.cuda_submodules = tuple(f"torch.cuda.{s}." for s in data.get("torch_cuda_submodules", ()))
        self.detectors: Dict[str, List[dict]] = {}
        for r in data["rules"]:
            if "detector" in r:
                self.detectors.setdefault(r["detector"], []).append(r)

    def match(self, name: str, kind: str) -> Optional[dict]:
        """The rule for the qualified ``name`` used as ``kind`` (import / call / use), or None."""
        for sub in self.cuda_submodules:
            if name.startswith(sub) and name != sub:
                name = "torch.cuda." + name[len(sub):]
                break
        for prefix, rule in self.prefixes:
            if name == prefix or name.startswith(prefix + "."):
                if rule.get("strict_prefix") and name == prefix:
                    return None
                if any(name == s or name.startswith(s + ".") for s in rule.get("skip_names", ())):
                    return None
                on = rule.get("on", ("import", "use"))
                if kind in on or (kind == "call" and "use" in on):
                    return rule
                return None
        return None


def _const_str(node) -> Optional[str]:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _kw(call: ast.Call, name: str):
    for k in call.keywords:
        if k.arg == name:
            return k.value
    return None


def _arg(call: ast.Call, pos: int, name: str):
    v = _kw(call, name)
    if v is None and len(call.args) > pos and not isinstance(call.args[pos], ast.Starred):
        v = call.args[pos]
    return v


def _src(node) -> str:
    try:
        text = ast.unparse(node)
    except Exception:  # pragma: no cover - unparse handles every node the parser makes
        return "..."
    return text if len(text) <= 60 else text[:57] + "..."


class Scanner(ast.NodeVisitor):
    """Walks one module; ``hits`` collects what matched."""

    def __init__(self, tree: ast.Module, index: RuleIndex):
        self.index = index
        self.hits: List[Hit] = []
        self.aliases: Dict[str, str] = {}
        self.assigned: Dict[str, List[ast.AST]] = {}
        self.docstrings = set()
        self.functions: Dict[str, ast.AST] = {}
        self._torchrun_seen = False
        self._prepass(tree)

    # -- preparation ------------------------------------------------------------------
    def _prepass(self, tree: ast.Module) -> None:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.aliases[a.asname] = a.name
                    else:
                        top = a.name.partition(".")[0]
                        self.aliases[top] = top
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    if a.name != "*":
                        self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        self.assigned.setdefault(t.id, []).append(node.value)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions.setdefault(node.name, node)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                body = node.body
                if body and isinstance(body[0], ast.Expr) and _const_str(body[0].value) is not None:
                    self.docstrings.add(id(body[0].value))

    def qual(self, node) -> Optional[str]:
        """The dotted name ``node`` stands for through the file's imports, or None."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.qual(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def hit(self, rule: str, node, **kw) -> None:
        self.hits.append(Hit(rule, getattr(node, "lineno", 0), getattr(node, "col_offset", 0), **kw))

    def detector_rule(self, detector: str, rule_id: Optional[str] = None) -> Optional[dict]:
        rules = self.index.detectors.get(detector, [])
        for r in rules:
            if rule_id is None or r["id"] == rule_id:
                return r
        return None

    # -- names: imports, calls, uses ----------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            rule = self.index.match(a.name, "import")
            if rule:
                self.hit(rule["id"], node, what=f"`import {a.name}`: {rule['what']}")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if not node.module or node.level:
            return
        for a in node.names:
            name = node.module if a.name == "*" else f"{node.module}.{a.name}"
            rule = self.index.match(name, "import")
            if rule:
                self.hit(rule["id"], node, what=f"`from {node.module} import {a.name}`: {rule['what']}")

    def _name_use(self, node, kind: str, call: Optional[ast.Call] = None, assigned=None) -> bool:
        """Match a Name/Attribute chain; True when it resolved through the imports."""
        name = self.qual(node)
        if name is None:
            return False
        rule = self.index.match(name, kind)
        if rule is not None:
            refined = self._check(rule, name, call, assigned)
            if refined is not None:
                self.hit(rule["id"], node, **refined)
        return True

    def _check(self, rule: dict, name: str, call: Optional[ast.Call], assigned) -> Optional[dict]:
        """Apply the rule's ``check`` (data file) to the place; None drops the hit."""
        check = rule.get("check")
        what = f"`{name}`: {rule['what']}"
        if check is None:
            return {"what": what}
        refined = getattr(self, "_check_" + check)(rule, name, call, assigned)
        if refined is not None and "what" not in refined:
            refined["what"] = what
        return refined

    def _check_not_false_assignment(self, rule, name, call, assigned):
        if assigned is not None and isinstance(assigned, ast.Constant) and not assigned.value:
            return None
        return {}

    def _check_no_args(self, rule, name, call, assigned):
        if call is None or call.args or call.keywords:
            return None
        return {}

    def _check_cuda_device_type(self, rule, name, call, assigned):
        if call is None:
            return None
        dt = _kw(call, "device_type")
        if dt is None or (_const_str(dt) or "").startswith("cuda"):
            return {}
        return None

    def _check_cuda_device_type_arg(self, rule, name, call, assigned):
        if call is None:
            return None
        dt = _arg(call, 0, "device_type")
        s = _const_str(dt) if dt is not None else None
        if s is None or not s.startswith("cuda"):
            return None
        return {"what": f"`{name.rsplit('.', 1)[1]}({s!r}, ...)`: {rule['what']}"}

    def _check_framework_accelerator(self, rule, name, call, assigned):
        if call is None:
            return None
        acc = _kw(call, "accelerator")
        s = "auto" if acc is None else _const_str(acc)
        if s not in ("gpu", "cuda", "auto"):
            return None  # the CPU, TPU, MPS or a variable: nothing CUDA-specific to say
        shown = ", ".join(f"{k}={_src(_kw(call, k))}" for k in ("accelerator", "devices", "strategy", "precision")
                          if _kw(call, k) is not None)
        return {"what": f"`{name.rsplit('.', 1)[1]}({shown})`: {rule['what']}"}

    def _check_training_args(self, rule, name, call, assigned):
        if call is None:
            return None
        shown = ", ".join(f"{k}={_src(_kw(call, k))}" for k in ("bf16", "fp16", "use_cpu", "no_cuda", "ddp_backend")
                          if _kw(call, k) is not None)
        if any(isinstance(_kw(call, k), ast.Constant) and _kw(call, k).value is True for k in ("use_cpu", "no_cuda")):
            return {"what": f"`TrainingArguments({shown})`: keeps the Trainer on the CPU, under hal run too",
                    "fix": "drop use_cpu / no_cuda to train on the backend", "level": "caveat"}
        return {"what": f"`{name.rsplit('.', 1)[1]}({shown})`: {rule['what']}" if shown else f"`{name}`: {rule['what']}"}

    def _check_accelerate_cpu(self, rule, name, call, assigned):
        if call is None:
            return None
        cpu = _kw(call, "cpu")
        if isinstance(cpu, ast.Constant) and cpu.value is True:
            return {"what": "`Accelerator(cpu=True)`: keeps Accelerate on the CPU, under hal run too",
                    "fix": "drop cpu=True to train on the backend", "level": "caveat"}
        mp = _kw(call, "mixed_precision")
        return {"what": f"`Accelerator(mixed_precision={_src(mp)})`: {rule['what']}" if mp is not None else f"`{name}`: {rule['what']}"}

    def _check_no_portable_map_location(self, rule, name, call, assigned):
        if call is None:
            return None
        ml = _arg(call, 1, "map_location")
        if ml is None:
            return {}
        s = _const_str(ml)
        if s is not None and s.startswith("cuda"):
            return {"what": f"`torch.jit.load(map_location={s!r})`: {rule['what']}"}
        return None

    def _check_cuda_sources(self, rule, name, call, assigned):
        if call is None:
            return None
        short = name.rsplit(".", 1)[1]
        if short == "CUDAExtension":
            return {"what": f"`CUDAExtension(...)`: {rule['what']}"}
        if short == "load_inline":
            cs = _arg(call, 2, "cuda_sources")
            if cs is None or (isinstance(cs, ast.Constant) and cs.value is None):
                return None
            return {"what": f"`load_inline(cuda_sources=...)`: {rule['what']}"}
        sources = _arg(call, 1, "sources")
        if sources is None:
            return None
        strings = [_const_str(n) for n in ast.walk(sources)]
        if any(s and s.endswith((".cu", ".cuh")) for s in strings):
            return {"what": f"`cpp_extension.load(sources=[... .cu])`: {rule['what']}"}
        if all(s is None for s in strings):
            return {"what": f"`cpp_extension.load(sources={_src(sources)})`: a C++/CUDA extension built at run "
                            f"time; if the sources include .cu files, {rule['what']}", "level": "caveat"}
        return None

    def _check_describe_map_location(self, rule, name, call, assigned):
        if call is None:
            return None
        ml = _arg(call, 1, "map_location")
        form = "no map_location" if ml is None else f"map_location={_src(ml)}"
        wo = _kw(call, "weights_only")
        if wo is not None:
            form += f", weights_only={_src(wo)}"
        return {"what": f"`torch.load` ({form}): {rule['what']}"}

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, (ast.Name, ast.Attribute)) and self._name_use(func, "call", call=node):
            pass
        else:
            self.visit(func)
        self._detect_call(node)
        for a in node.args:
            self.visit(a)
        for k in node.keywords:
            self.visit(k.value)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if not self._name_use(node, "use"):
            self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self._name_use(node, "use")

    def visit_Assign(self, node: ast.Assign) -> None:
        for t in node.targets:
            if isinstance(t, ast.Attribute) and self.qual(t):
                self._name_use(t, "use", assigned=node.value)
            elif isinstance(t, ast.Subscript) and self.qual(t.value) in ENVIRON:
                key = _const_str(t.slice)
                if key:
                    self._env(key, t, "write")
                self.visit(t.slice)
            else:
                self.visit(t)
        self.visit(node.value)

    def _decorators(self, node) -> None:
        for d in node.decorator_list:
            if isinstance(d, (ast.Name, ast.Attribute)):
                self._name_use(d, "call")
            else:
                self.visit(d)

    def visit_FunctionDef(self, node) -> None:
        self._decorators(node)
        if any(self.qual(d) in JIT_SCRIPT for d in node.decorator_list):
            self._jit_body(node)
        if node.name == "__setstate__":
            self._setstate(node)
        for part in (node.args, node.returns):
            if part is not None:
                self.visit(part)
        for stmt in node.body:
            self.visit(stmt)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._decorators(node)
        for b in node.bases + [k.value for k in node.keywords]:
            self.visit(b)
        for stmt in node.body:
            self.visit(stmt)

    # -- detectors ------------------------------------------------------------------------
    def _is_tensor_device(self, node, depth: int = 0) -> bool:
        """``x.device``, ``x.device.type``, ``str(x.device)`` of something that is likely a tensor."""
        if depth > 3:
            return False
        if isinstance(node, ast.Attribute):
            if node.attr == "device" and self.qual(node) is None:
                base = node.value
                return not (isinstance(base, ast.Name) and base.id in CONFIG_BASES)
            if node.attr == "type":
                return self._is_tensor_device(node.value, depth + 1)
            return False
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str" and node.args:
            return self._is_tensor_device(node.args[0], depth + 1)
        if isinstance(node, ast.Name) and self.aliases.get(node.id) is None:
            values = self.assigned.get(node.id, [])
            return bool(values) and all(self._is_tensor_device(v, depth + 1) for v in values)
        return False

    def _is_cuda_literal(self, node) -> bool:
        s = _const_str(node)
        if s is not None:
            return s == "cuda" or s.startswith("cuda:")
        if isinstance(node, ast.Call) and self.qual(node.func) == "torch.device" and node.args:
            s = _const_str(node.args[0])
            return s is not None and (s == "cuda" or s.startswith("cuda:"))
        return False

    def visit_Compare(self, node: ast.Compare) -> None:
        sides = [node.left, *node.comparators]
        for a, b in zip(sides, sides[1:]):
            for x, y in ((a, b), (b, a)):
                if self._is_cuda_literal(x) and self._is_tensor_device(y):
                    self.hit("tensor-device-compare", node, what=f"`{_src(node)}`: " +
                             self.index.by_id["tensor-device-compare"]["what"])
                    break
                s = _const_str(x)
                if s and s.startswith("torch.cuda.") and s.endswith("Tensor"):
                    self.hit("tensor-type-string", node, what=f"`{_src(node)}`: " +
                             self.index.by_id["tensor-type-string"]["what"])
                    break
        self.generic_visit(node)

    def _detect_call(self, node: ast.Call) -> None:
        name = self.qual(node.func)
        func = node.func
        if isinstance(func, ast.Attribute) and name is None:
            if func.attr == "startswith" and node.args and self._is_cuda_prefix(node.args[0]) \
                    and self._is_tensor_device(func.value):
                self.hit("tensor-device-compare", node, what=f"`{_src(node)}`: " +
                         self.index.by_id["tensor-device-compare"]["what"])
            elif func.attr == "pin_memory" and not node.args:
                self.hit("tensor-pin-memory", node)
            elif func.attr == "add_argument" and node.args \
                    and _const_str(node.args[0]) in ("--local_rank", "--local-rank"):
                self.hit("launch-local-rank-arg", node)
        if name is None:
            return
        if name in DATALOADER:
            self._dataloader(node)
        elif name in INIT_PG:
            self._dist_init(node, name)
        elif name in JIT_SCRIPT and node.args and isinstance(node.args[0], ast.Name) \
                and node.args[0].id in self.functions:
            self._jit_body(self.functions[node.args[0].id])
        elif name.startswith(COMMAND_CALLS):
            for s in ast.walk(node):
                text = _const_str(s)
                if text and "nvidia-smi" in text:
                    self.hit("nvidia-smi-command", node, what=f"`{_src(node)}`: " +
                             self.index.by_id["nvidia-smi-command"]["what"])
                    break
        if name.startswith("os.environ.") or name == "os.putenv" or name == "os.getenv":
            method = name.rsplit(".", 1)[1]
            if method in ("setdefault", "putenv", "__setitem__") and node.args:
                key = _const_str(node.args[0])
                if key:
                    self._env(key, node, "write")
            elif method == "update":
                for k in node.keywords:
                    if k.arg:
                        self._env(k.arg, node, "write")
            elif method in ("get", "getenv", "__getitem__", "pop") and node.args:
                key = _const_str(node.args[0])
                if key:
                    self._env(key, node, "read")

    @staticmethod
    def _is_cuda_prefix(node) -> bool:
        s = _const_str(node)
        return s is not None and s.startswith("cuda")

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, ast.Load) and self.qual(node.value) in ENVIRON:
            key = _const_str(node.slice)
            if key:
                self._env(key, node, "read")
        self.generic_visit(node)

    def visit_Dict(self, node: ast.Dict) -> None:
        for k in node.keys:
            key = _const_str(k) if k is not None else None
            if key:
                self._env(key, k, "write")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and id(node) not in self.docstrings and "=" in node.value:
            for m in re.finditer(r"\b([A-Z][A-Z0-9_]*)=", node.value):
                self._env(m.group(1), node, "write", in_command=True)

    def _env(self, key: str, node, mode: str, in_command: bool = False) -> None:
        for rule in self.index.detectors.get("env-write", ()):
            names = rule.get("env_names", ())
            prefix = rule.get("env_prefix")
            if key in names or (prefix and key.startswith(prefix)):
                if mode == "read":
                    if "what_read" in rule:
                        self.hit(rule["id"], node, what=rule["what_read"], fix=rule.get("fix_read"))
                    return
                how = "in a command line" if in_command else "in the environment"
                self.hit(rule["id"], node, what=f"`{key}` set {how}: {rule['what']}")
                return
        if mode == "read" and key in TORCHRUN_VARS and not self._torchrun_seen:
            self._torchrun_seen = True
            self.hit("torchrun-env", node)

    def _dataloader(self, node: ast.Call) -> None:
        parts = []
        for k in node.keywords:
            if k.arg is None:
                parts.append(f"**{_src(k.value)}")
            elif k.arg in ("num_workers", "pin_memory", "pin_memory_device", "multiprocessing_context",
                           "persistent_workers", "worker_init_fn", "prefetch_factor"):
                parts.append(f"{k.arg}={_src(k.value)}")
        notes = []
        dev = _const_str(_kw(node, "pin_memory_device"))
        if dev and dev.startswith("cuda"):
            notes.append("pin_memory_device is redirected to the backend's device type")
        ctx = _const_str(_kw(node, "multiprocessing_context"))
        if ctx in ("spawn", "forkserver"):
            notes.append(f"{ctx} workers start under the shim too")
        form = f"DataLoader({', '.join(parts)})" if parts else "DataLoader(num_workers=0)"
        what = f"`{form}`: {self.index.by_id['dataloader']['what']}" + (f" ({'; '.join(notes)})" if notes else "")
        self.hit("dataloader", node, what=what)

    def _dist_init(self, node: ast.Call, name: str) -> None:
        short = name.rsplit(".", 1)[1]
        backend = _arg(node, 0, "backend") if short == "init_process_group" else _kw(node, "backend")
        values = self._strings(backend)
        init = _arg(node, 1, "init_method") if short == "init_process_group" else None
        store = _kw(node, "store")
        if init is not None:
            s = _const_str(init)
            scheme = s.split("://")[0] + "://" if s and "://" in s else None
            form = f"init_method {scheme or _src(init)}"
        elif store is not None:
            form = "a store object"
        else:
            form = "init_method env:// (the default: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE from the launcher)"
        shown = _src(backend) if backend is not None else "default"
        if short == "new_group" and backend is None:
            return
        if any("nccl" in v for v in values):
            rule = "dist-init-nccl"
        elif values and all(v == "gloo" for v in values):
            rule = "dist-init-gloo"
        else:
            rule = "dist-init-form"
        r = self.index.by_id[rule]
        via = f" (`{shown}` can be {' or '.join(repr(v) for v in values)})" if backend is not None and \
            not isinstance(backend, ast.Constant) and values else ""
        what = f"`{short}(backend={shown})`{via}, {form}: {r['what']}"
        self.hit(rule, node, what=what)
        device_id = _kw(node, "device_id") if short == "init_process_group" else None
        if device_id is not None:
            self.hit("dist-init-device-id", node, what=f"`init_process_group(device_id={_src(device_id)})`: "
                                                     f"{self.index.by_id['dist-init-device-id']['what']}")

    def _strings(self, node, depth: int = 0) -> List[str]:
        """String constants ``node`` can evaluate to: literals, ``a if c else b``, names assigned in the file."""
        if node is None or depth > 3:
            return []
        s = _const_str(node)
        if s is not None:
            return [s]
        if isinstance(node, ast.IfExp):
            return self._strings(node.body, depth + 1) + self._strings(node.orelse, depth + 1)
        if isinstance(node, ast.Name):
            out: List[str] = []
            for v in self.assigned.get(node.id, []):
                out += self._strings(v, depth + 1)
            return out
        return []

    def _jit_body(self, fn) -> None:
        for n in _cuda_sites(fn):
            self.hit("jit-script-cuda", n, what=f"`{_src(n)}` in TorchScript function `{fn.name}`: " +
                     self.index.by_id["jit-script-cuda"]["what"])

    def _setstate(self, fn) -> None:
        for n in _cuda_sites(fn):
            self.hit("setstate-cuda", n)
            return


def _cuda_sites(fn) -> Iterator[ast.AST]:
    """Calls to ``.cuda()`` and ``"cuda..."`` constants inside ``fn``."""
    for n in ast.walk(fn):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "cuda":
            yield n
        elif _const_str(n) is not None and (n.value == "cuda" or n.value.startswith("cuda:")):
            yield n


def scan_tree(tree: ast.Module, index: RuleIndex) -> List[Hit]:
    """Every hit in one parsed module, one per (line, rule)."""
    s = Scanner(tree, index)
    s.visit(tree)
    seen, out = set(), []
    for h in sorted(s.hits, key=lambda h: (h.line, h.col, h.rule)):
        if (h.line, h.rule) not in seen:
            seen.add((h.line, h.rule))
            out.append(h)
    return out
