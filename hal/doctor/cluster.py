"""``hal doctor`` across nodes: every process of a multi-node torchrun job takes part, rank 0 reports.

::

    torchrun --nnodes 4 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint host-a:29400 -m hal doctor
    hal doctor --nnodes 4 --rdzv-endpoint host-a:29400        # the same, on each node

Every process builds a :class:`~hal.doctor.cluster_context.ClusterContext` on the launcher's
store and runs the checks of :data:`ORDER` in that order, chosen so that a broken network
cannot hang the doctor: the nodes first talk only through the store, with a deadline on every
wait (a node that does not answer within ``timeout_s`` is named), and the default process
group is created only once every node reaches every other on the collective's addresses.

* ``software``: torch, hal, backend, vendor stack, driver and device count of each node (the
  local ``backends``, ``devices``, ``versions`` and ``transport`` checks run on each node first),
  the node that differs named with its versions;
* ``clocks``: each node's offset from rank 0 from store round trips (NTP's method);
* ``reachability``: each node listens on an ephemeral port (the collective's connections
  use such ports) and on every ``--port``, on the address its collective library would use
  (:mod:`hal.doctor.netif`), and connects to every other node and to the rendezvous store,
  each try limited to :data:`CONNECT_TIMEOUT_S`;
* ``transport``: RDMA or TCP and the collective's interface per node, WARN when they disagree;
* ``process_group``: ``hal.dist.init`` with a timeout of ``timeout_s``;
* ``links``, ``scale_ladder``: node x node bandwidth and the all-reduce ladder
  (:mod:`hal.doctor.cluster_links`, SKIP where this hal lacks it).

Test hooks (each node reports the ones set): ``HAL_DOCTOR_TEST_VERSIONS='{"torch": "2.12.0"}'``
replaces what this node reports as its software, ``HAL_DOCTOR_TEST_CLOCK_OFFSET_S=1.5`` shifts
this node's clock in the clock exchange (nodes on one host share one clock), and
``HAL_DOCTOR_TEST_CLOSED_PORTS=29600[,ephemeral]`` keeps this node from listening on those
ports, as a firewall that rejects them would, and ``HAL_DOCTOR_TEST_HANG=clocks`` (any step of
:data:`ORDER`) makes this node's local rank 0 stop answering at that step (for 10 minutes).
"""
from __future__ import annotations

import errno
import json
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from hal.doctor import cluster_checks as cc
from hal.doctor.cluster_context import ClusterContext, from_launcher_env

SCHEMA = "hal.doctor.cluster/1"
ORDER = ("software", "clocks", "reachability", "transport", "process_group", "links", "scale_ladder")
DEFAULT_TIMEOUT_S = 20.0
#: limit of one connection attempt in the reachability check, seconds
CONNECT_TIMEOUT_S = 2.5
#: round trips per node in the clock exchange (the one with the smallest round trip is kept)
CLOCK_SAMPLES = 8
LOCAL_CHECKS = ("backends", "devices", "versions", "transport")
ENV_TEST_VERSIONS = "HAL_DOCTOR_TEST_VERSIONS"
ENV_TEST_CLOCK_OFFSET = "HAL_DOCTOR_TEST_CLOCK_OFFSET_S"
ENV_TEST_CLOSED_PORTS = "HAL_DOCTOR_TEST_CLOSED_PORTS"
#: set by ``hal doctor --nnodes``: the rendezvous endpoint, which torchrun does not pass to workers
ENV_RDZV_ENDPOINT = "HAL_DOCTOR_RDZV_ENDPOINT"
#: set by ``hal doctor --nnodes``: local rank 0 writes the exit code there (torchrun itself exits 1)
ENV_EXIT_FILE = "HAL_DOCTOR_EXIT_FILE"
_TEST_HOOKS = (ENV_TEST_VERSIONS, ENV_TEST_CLOCK_OFFSET, ENV_TEST_CLOSED_PORTS, "HAL_DOCTOR_TEST_HANG")


def schema_path():
    """``hal/data/doctor-cluster.schema.json``, the published schema of the report."""
    from pathlib import Path

    return Path(__file__).resolve().parent.parent / "data" / "doctor-cluster.schema.json"


def is_multi_node(env: Optional[Mapping[str, str]] = None) -> bool:
    """True under a launcher whose job spans nodes (``WORLD_SIZE > LOCAL_WORLD_SIZE``)."""
    env = os.environ if env is None else env
    try:
        return int(env.get("WORLD_SIZE", 1)) > int(env.get("LOCAL_WORLD_SIZE", env.get("WORLD_SIZE", 1)))
    except ValueError:
        return False


def rendezvous_endpoint(env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """``HOST:PORT`` of torchrun's ``--rdzv-endpoint``: from ``hal doctor --nnodes``, torchrun's
    ``PET_RDZV_ENDPOINT``, or the agent's command line (the worker's parent process)."""
    env = os.environ if env is None else env
    for var in (ENV_RDZV_ENDPOINT, "PET_RDZV_ENDPOINT"):
        if env.get(var):
            return env[var]
    try:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            argv = f.read().decode(errors="replace").split("\0")
    except OSError:
        return None
    for i, a in enumerate(argv):
        for flag in ("--rdzv-endpoint", "--rdzv_endpoint"):
            if a == flag and i + 1 < len(argv):
                return argv[i + 1]
            if a.startswith(flag + "="):
                return a.split("=", 1)[1]
    return None


def _split_endpoint(ep: str) -> Tuple[str, int]:
    host, _, port = ep.rpartition(":")
    return host.strip("[]") or ep, int(port) if port.isdigit() else 29400


class _Exchange:
    """Records through the launcher's store, every wait with a deadline (``check()`` polling:
    a timed-out ``store.wait`` would leave the client connection unusable)."""

    def __init__(self, store, prefix: str):
        import torch.distributed as dist

        self.store = dist.PrefixStore(prefix, store)

    def post(self, key: str, value) -> None:
        self.store.set(key, json.dumps(value, default=str))

    def gather(self, keys: Mapping[int, str], limit_s: float, spin: bool = False) -> Tuple[Dict[int, object], List[int]]:
        """Values of ``keys`` (id -> key) posted within ``limit_s``; and the ids that were not."""
        started = time.monotonic()
        deadline = started + limit_s
        got: Dict[int, object] = {}
        delay = 0.002
        while True:
            for i, k in keys.items():
                if i not in got and self.store.check([k]):
                    got[i] = json.loads(self.store.get(k))
            now = time.monotonic()
            if len(got) == len(keys) or now >= deadline:
                return got, [i for i in keys if i not in got]
            if not spin:
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
            elif now > started + 0.02:  # a round trip is a few hundred microseconds: past that, yield
                time.sleep(0.0005)

    def one(self, key: str, limit_s: float, spin: bool = False):
        got, _ = self.gather({0: key}, limit_s, spin)
        return got.get(0)


def _now() -> float:
    return time.time() + float(os.environ.get(ENV_TEST_CLOCK_OFFSET, "0") or 0)


def _test_hooks() -> Dict[str, str]:
    return {k: os.environ[k] for k in _TEST_HOOKS if os.environ.get(k)}


def node_software(local: Sequence[dict]) -> Dict[str, object]:
    """What ``software`` compares, from this node's local checks (plus the test hook's overrides)."""
    import torch

    from hal._version import __version__ as hal_version

    by = {c["name"]: c for c in local}
    sw: Dict[str, object] = {"hal": hal_version, "torch": torch.__version__}
    rep = by.get("backends", {}).get("details", {}).get("report", {})
    sw["backend"] = rep.get("selected")
    dev = by.get("devices", {}).get("details", {})
    sw["device_type"], sw["device_count"] = dev.get("device_type"), dev.get("count")
    module = next((b.get("module") for b in rep.get("backends", []) if b.get("name") == rep.get("selected")), None)
    for key, val in by.get("versions", {}).get("details", {}).get("versions", {}).items():
        if key == module:
            sw["vendor_module"] = f"{key} {val}"
        else:
            sw[key] = val
    raw = os.environ.get(ENV_TEST_VERSIONS)
    if raw:
        try:
            sw.update(json.loads(raw))
        except ValueError:
            raise ValueError(f"{ENV_TEST_VERSIONS}={raw!r} is not JSON; write '{{\"torch\": \"2.12.0\"}}'") from None
    return sw


class _Listeners:
    """This node's listening sockets for the reachability check, accepting until closed."""

    def __init__(self, address: str, ports: Sequence[int]):
        closed = {p.strip() for p in os.environ.get(ENV_TEST_CLOSED_PORTS, "").split(",") if p.strip()}
        self.socks: List[socket.socket] = []
        self.offered: List[dict] = []
        self.notes: List[str] = []
        wanted = [(0, "ephemeral")] + [(p, f"--port {p}") for p in ports]
        for port, what in wanted:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((address, port))
            except OSError as exc:
                s.close()
                if exc.errno == errno.EADDRINUSE:  # another process holds it: test that one
                    self.offered.append({"port": port, "what": what})
                    self.notes.append(f"port {port} is in use on this node by another process; tested as it is")
                    continue
                raise
            bound = s.getsockname()[1]
            if (what == "ephemeral" and "ephemeral" in closed) or str(port) in closed:
                s.close()  # test hook: as a firewall that rejects the port
                self.offered.append({"port": bound if port else 0, "what": what})
                self.notes.append(f"{ENV_TEST_CLOSED_PORTS}: not listening on {what} ({bound})")
                continue
            s.listen(64)
            s.settimeout(0.2)
            self.socks.append(s)
            self.offered.append({"port": bound, "what": what})
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._accept, args=(s,), daemon=True) for s in self.socks]
        for t in self._threads:
            t.start()

    def _accept(self, s: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = s.accept()
                conn.close()
            except (socket.timeout, OSError):
                continue

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(1.0)
        for s in self.socks:
            s.close()


def try_connect(address: str, port: int, timeout_s: float = CONNECT_TIMEOUT_S) -> Tuple[bool, str, float]:
    """``(reached, error, seconds)`` for one TCP connection; the error is ``refused``, ``timed out``
    or the system's words."""
    t0 = time.monotonic()
    try:
        with socket.create_connection((address, port), timeout=timeout_s):
            return True, "", time.monotonic() - t0
    except ConnectionRefusedError:
        return False, "refused", time.monotonic() - t0
    except socket.timeout:
        return False, "timed out", time.monotonic() - t0
    except OSError as exc:
        return False, exc.strerror or str(exc), time.monotonic() - t0


class Session:
    """One process's run of the cluster doctor (see the module docstring)."""

    def __init__(self, ctx: ClusterContext, ports: Sequence[int] = (), env: Optional[Mapping[str, str]] = None):
        self.ctx, self.ports, self.env = ctx, list(ports), dict(os.environ if env is None else env)
        restart = self.env.get("TORCHELASTIC_RESTART_COUNT", "0")
        self.x = _Exchange(ctx.store, f"hal.doctor/{restart}/")
        self.t = float(ctx.timeout_s)
        self.local_limit = max(self.t, 20.0)
        self.facts: Dict[int, dict] = {}
        self.me: dict = {}
        self.present: List[int] = list(range(ctx.nnodes))
        self.go_pg = True
        self.go_links = True

    # -- helpers --------------------------------------------------------------------------------
    def label(self, node: int) -> str:
        return self.ctx.node_label(node)

    def label_rank(self, rank: int) -> str:
        return f"rank {rank} ({self.label(self.ctx.node_of(rank))})"

    def _gather_nodes(self, key: str, nodes: Sequence[int], limit_s: float):
        return self.x.gather({n: f"{key}/{n}" for n in nodes}, limit_s)

    # -- the steps ------------------------------------------------------------------------------
    def meet(self) -> None:
        """Node names first, so that everything after names nodes by host."""
        ctx = self.ctx
        if ctx.is_leader:
            self.x.post(f"name/{ctx.node_rank}", ctx.hostname)
        got, _ = self.x.gather({n: f"name/{n}" for n in range(ctx.nnodes)}, self.t)
        ctx.node_names = [str(got.get(n, "")) for n in range(ctx.nnodes)]

    def software(self) -> Optional[dict]:
        from hal import doctor
        from hal.doctor import netif

        ctx = self.ctx
        if ctx.is_leader:
            local = doctor.run(checks=list(LOCAL_CHECKS), timeout=self.local_limit, jobs=2)["checks"]
            ccl = self._ccl(local)
            self.me = {"host": ctx.hostname, "leader_rank": ctx.rank, "software": node_software(local),
                       "local": [{k: c.get(k) for k in ("name", "status", "summary", "seconds")} for c in local],
                       "transport": next((c for c in local if c["name"] == "transport"), None),
                       "collective": netif.collective_address(ccl, self.env.get("MASTER_ADDR"), self.env),
                       "ccl": ccl, "test_hooks": _test_hooks()}
            self.x.post(f"facts/{ctx.node_rank}", self.me)
        res = None
        if ctx.rank == 0:
            limit = self.local_limit * 1.5 + self.t
            got, missing = self._gather_nodes("facts", range(ctx.nnodes), limit)
            self.facts = {int(n): v for n, v in got.items()}
            self.present = sorted(self.facts)
            res = cc.software(self.facts, self.label, missing, limit)
            self.x.post("plan/present", self.present)
        if ctx.is_leader:
            plan = self.x.one("plan/present", self.local_limit * 2 + self.t * 2)
            self.present = list(plan) if plan is not None else [ctx.node_rank]
        return res

    @staticmethod
    def _ccl(local: Sequence[dict]) -> str:
        from hal.plugin.registry import get_registry

        try:
            spec = get_registry().selected().spec
            return "gloo" if spec.device_type == "cpu" else (spec.dist_backend or "gloo")
        except Exception:  # the backends check has the reason
            return "gloo"

    def clocks(self) -> Optional[dict]:
        ctx = self.ctx
        if not ctx.is_leader or ctx.node_rank not in self.present:
            return None
        others = [n for n in self.present if n != 0]
        if ctx.rank == 0:
            missing = []
            for n in others:
                for k in range(CLOCK_SAMPLES):
                    if self.x.one(f"clk/{n}/{k}/req", self.t, spin=True) is None:
                        missing.append(n)
                        break
                    self.x.post(f"clk/{n}/{k}/resp", _now())
            got, late = self._gather_nodes("clk/est", [n for n in others if n not in missing], self.t)
            offsets = {0: {"offset_s": 0.0, "round_trip_s": 0.0, "bound_s": 0.0, "samples": 0}}
            offsets.update({int(n): v for n, v in got.items()})
            return cc.clocks(offsets, self.label, missing + late, self.t)
        samples = []
        for k in range(CLOCK_SAMPLES):
            t1 = _now()
            self.x.post(f"clk/{ctx.node_rank}/{k}/req", t1)
            # rank 0 serves the nodes one after the other: the first answer may wait for the others
            t2 = self.x.one(f"clk/{ctx.node_rank}/{k}/resp", self.t * (len(others) if k == 0 else 1), spin=True)
            if t2 is None:
                break
            samples.append((t1, float(t2), _now()))
        self.x.post(f"clk/est/{ctx.node_rank}", cc.clock_offset(samples))
        return None

    def reachability(self) -> Optional[dict]:
        ctx = self.ctx
        res = None
        if ctx.is_leader and ctx.node_rank in self.present:
            res = self._reach_leader()
        if ctx.rank == 0 and res is not None:
            d = res["details"]
            node_fail = [a for a in d["failed"] if a["to"] is not None and a["what"] == "ephemeral"]
            self.go_pg = not (self.present != list(range(ctx.nnodes)) or node_fail or d["loopback"]
                              or d["missing"] or d["unaddressed"])
            why = ("" if self.go_pg else "a node is missing, or the collective's ports are not reachable "
                                         "between the nodes (reachability)")
            self.x.post("plan/pg", {"go": self.go_pg, "why": why})
        plan = self.x.one("plan/pg", self._budget(4))
        self.go_pg = bool(plan and plan["go"])
        self.pg_why = (plan or {}).get("why") or f"rank 0 did not post its plan within {self._budget(4):g} s"
        return res

    def _reach_leader(self) -> Optional[dict]:
        ctx = self.ctx
        me = ctx.node_rank
        col = self.me.get("collective") or {}
        address = col.get("address")
        # without an address of its own the node still tries the others; nobody can try it
        lis = _Listeners(address, self.ports) if address else None
        try:
            self.x.post(f"listen/{me}", {"address": address, "ports": lis.offered if lis else [],
                                         "notes": lis.notes if lis else [], "how": col.get("how")})
            got, missing = self._gather_nodes("listen", self.present, self.t)
            targets = []
            for n, rec in sorted(got.items()):
                if int(n) == me or not rec["address"]:
                    continue
                for p in rec["ports"]:
                    targets.append((int(n), rec["address"], p["port"], p["what"]))
            master = self.env.get("MASTER_ADDR"), self.env.get("MASTER_PORT")
            if master[0] and master[1]:
                targets.append((None, master[0], int(master[1]), "rendezvous store (MASTER_ADDR:MASTER_PORT)"))
            ep = rendezvous_endpoint(self.env)
            if ep:
                host, port = _split_endpoint(ep)
                if (host, str(port)) != master:
                    targets.append((None, host, port, "rendezvous endpoint (--rdzv-endpoint)"))

            def attempt(t):
                to, addr, port, what = t
                if not port:  # closed by the test hook before a port was chosen
                    return {"from": me, "to": to, "address": addr, "port": port, "what": what, "ok": False,
                            "error": "refused", "seconds": 0.0}
                ok, err, secs = try_connect(addr, port)
                return {"from": me, "to": to, "address": addr, "port": port, "what": what, "ok": ok,
                        "error": err, "seconds": secs}

            with ThreadPoolExecutor(max_workers=max(1, min(32, len(targets)))) as pool:
                attempts = list(pool.map(attempt, targets))
            self.x.post(f"reach/{me}", {"attempts": attempts, "missing": missing})
            res = None
            if ctx.rank == 0:
                limit = self.t + CONNECT_TIMEOUT_S * 2
                got_r, late = self._gather_nodes("reach", self.present, limit)
                all_attempts = [a for n in sorted(got_r) for a in got_r[n]["attempts"]]
                hosts = {f.get("host") for f in self.facts.values()}
                loop = [n for n, f in sorted(got.items())
                        if len(hosts) > 1 and str(f["address"]).startswith("127.")]
                unaddressed = {int(n): f.get("how") for n, f in got.items() if not f["address"]}
                res = cc.reachability(all_attempts, self.label, [int(n) for n in loop],
                                      sorted(set(late) | set(missing)), CONNECT_TIMEOUT_S, self.t, unaddressed)
                res["details"]["listening"] = {str(n): v for n, v in got.items()}
                self.x.post("reach/done", True)
            else:
                self.x.one("reach/done", self.t * 2 + CONNECT_TIMEOUT_S * 2)
            return res
        finally:
            if lis:
                lis.close()

    def transport(self) -> Optional[dict]:
        if self.ctx.rank != 0:
            return None
        return cc.transport(self.facts, self.label)

    def process_group(self) -> Optional[dict]:
        import hal.dist

        ctx = self.ctx
        err = None
        t0 = time.monotonic()
        if self.go_pg:
            try:
                info = hal.dist.init(timeout=self.t, store=ctx.store)
                ctx.device = __import__("torch").device(info.device)
                ccl = info.backend.split(",")[-1].split(":")[-1]
                ctx.backend = ccl
            except Exception as exc:
                err = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            self.x.post(f"pg/{ctx.rank}", err)
        seconds = time.monotonic() - t0
        res = None
        if ctx.rank == 0:
            if not self.go_pg:
                res = cc.result(cc.SKIP, f"not started: {self.pg_why}")
            else:
                got, _ = self.x.gather({r: f"pg/{r}" for r in range(ctx.world_size)}, self.t * 2)
                res = cc.process_group({int(r): v for r, v in got.items()}, ctx.world_size, self.label_rank, seconds)
            self.x.post("plan/links", res["status"] == cc.OK)
        plan = self.x.one("plan/links", self.t * 3)
        self.go_links = bool(plan)
        return res

    def cluster_link_check(self, name: str) -> Optional[dict]:
        if not self.go_links:
            return cc.result(cc.SKIP, "not run: the default process group did not come up")
        try:
            import hal.doctor.cluster_links as links_mod
        except ModuleNotFoundError as exc:
            if exc.name != "hal.doctor.cluster_links":
                raise
            return cc.result(cc.SKIP, "not available in this hal (hal.doctor.cluster_links is missing)")
        try:
            return getattr(links_mod, name)(self.ctx)
        except Exception as exc:  # one check's error is its FAIL, not the doctor's crash
            return cc.result(cc.FAIL, f"{type(exc).__name__}: {exc}", "the error names the cause")

    def _budget(self, phases: int) -> float:
        """How long a rank waits for rank 0 to get through ``phases`` more steps."""
        return self.local_limit * 2 + self.t * (phases * 2 + 2) + CONNECT_TIMEOUT_S * 2

    # -- the whole run --------------------------------------------------------------------------
    def run(self) -> Tuple[Optional[dict], dict]:
        """Every check in :data:`ORDER`; returns (the report on rank 0 or None, the final status)."""
        started, t0 = time.time(), time.monotonic()
        self.meet()
        steps: List[Tuple[str, Callable[[], Optional[dict]]]] = [
            ("software", self.software), ("clocks", self.clocks), ("reachability", self.reachability),
            ("transport", self.transport), ("process_group", self.process_group),
            ("links", lambda: self.cluster_link_check("links")),
            ("scale_ladder", lambda: self.cluster_link_check("scale_ladder"))]
        from hal.doctor.runner import ENV_HANG, _named

        checks = []
        for name, fn in steps:
            s0 = time.monotonic()
            if self.ctx.is_leader and _named(ENV_HANG, name):  # test hook: this node stops answering
                time.sleep(600)
            try:
                res = fn()
            except Exception as exc:  # the doctor's own failure is this step's FAIL, never a crash
                res = cc.result(cc.FAIL, f"{self.label_rank(self.ctx.rank)}: {type(exc).__name__}: {exc}",
                                "a bug or an unusual set-up on that node: report it with this message")
                if self.ctx.rank == 0:  # the others wait on rank 0's plans: tell them to stop
                    self.go_pg = self.go_links = False
                    self.x.post("plan/pg", {"go": False, "why": f"rank 0 failed in {name}"})
                    self.x.post("plan/links", False)
            if self.ctx.rank == 0:
                res = res or cc.result(cc.SKIP, "no result")
                checks.append({"name": name, "status": res.get("status", cc.FAIL),
                               "summary": str(res.get("summary", "")), "details": res.get("details") or {},
                               "fix": res.get("fix") or "", "seconds": time.monotonic() - s0})
        report = None
        if self.ctx.rank == 0:
            final = cc.overall(checks)
            report = self._report(checks, final, started, time.monotonic() - t0)
            self.x.post("final", final)
        else:
            final = self.x.one("final", self._budget(2))
            if final is None:
                final = {"status": cc.FAIL, "exit_code": 2,
                         "missing": f"rank 0 ({self.label(0)}) did not post the report's status within "
                                    f"{self._budget(2):g} s"}
        self._leave()
        return report, final

    def _leave(self) -> None:
        import hal.dist

        ctx = self.ctx
        self.x.post(f"bye/{ctx.rank}", True)
        if ctx.rank == 0 and self.env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() != "true":
            # rank 0 hosts the store: let the others read the final status first
            self.x.gather({r: f"bye/{r}" for r in range(1, ctx.world_size)}, 5.0)
        try:
            hal.dist.destroy()
        except Exception:
            pass

    def _report(self, checks, final, started, seconds) -> dict:
        ctx = self.ctx
        nodes = []
        for n in range(ctx.nnodes):
            f = self.facts.get(n, {})
            col = f.get("collective") or {}
            nodes.append({"node": n, "host": ctx.node_names[n] if n < len(ctx.node_names) else "",
                          "leader_rank": ctx.leaders[n], "address": col.get("address"),
                          "interface": col.get("interface"), "software": f.get("software", {}),
                          "test_hooks": f.get("test_hooks", {}), "posted": n in self.facts})
        return {"schema": SCHEMA, **final, "time_unix": started, "seconds": seconds,
                "world_size": ctx.world_size, "nnodes": ctx.nnodes, "nproc_per_node": ctx.local_world_size,
                "timeout_s": self.t, "rendezvous": {"master_addr": self.env.get("MASTER_ADDR"),
                                                    "master_port": self.env.get("MASTER_PORT"),
                                                    "endpoint": rendezvous_endpoint(self.env)},
                "ports": self.ports, "nodes": nodes, "checks": checks}


def run(ports: Sequence[int] = (), timeout: Optional[float] = None) -> Tuple[Optional[dict], dict, ClusterContext]:
    """The cluster doctor in this process (under a multi-node torchrun).

    :param ports: ports the job uses on every node, tested by the reachability check.
    :param timeout: seconds any wait on another node may take (default 20).
    :return: ``(report, final, ctx)``: the report (schema ``hal.doctor.cluster/1``) on global rank 0,
        None elsewhere; ``final`` = ``{"status", "exit_code"}`` on every rank.
    """
    from hal.dist.process_group import launcher_store

    t = float(timeout) if timeout is not None else DEFAULT_TIMEOUT_S
    store = launcher_store(timeout=t)
    ctx = from_launcher_env(store, timeout_s=t)
    session = Session(ctx, ports)
    report, final = session.run()
    return report, final, ctx


def format_text(report: dict, paint: Callable[[str, str], str] = lambda s, c: s) -> str:
    """The report as a person reads it."""
    colors = {"OK": "green", "WARN": "yellow", "FAIL": "red", "SKIP": "dim"}
    rdzv = report["rendezvous"]
    lines = [f"hal doctor across {report['nnodes']} nodes x {report['nproc_per_node']} process(es) "
             f"(world size {report['world_size']}; store {rdzv['master_addr']}:{rdzv['master_port']}"
             f"{', rendezvous ' + rdzv['endpoint'] if rdzv['endpoint'] else ''})"]
    for nd in report["nodes"]:
        sw = nd["software"]
        hooks = f"  test hooks: {', '.join(f'{k}={v}' for k, v in nd['test_hooks'].items())}" if nd["test_hooks"] else ""
        lines.append(f"  node {nd['node']} ({nd['host']}): rank {nd['leader_rank']}, "
                     f"{nd['address'] or '?'} on {nd['interface'] or '?'}, {sw.get('backend', '?')}, "
                     f"torch {sw.get('torch', '?')}{hooks}")
    lines.append("")
    for c in report["checks"]:
        st = c["status"]
        lines.append(f"{paint(f'{st:<4}', colors[st])}  {c['name']:<13} {c['summary']}")
        if st in ("WARN", "FAIL") and c.get("fix"):
            lines.append(f"{'':19} fix: {c['fix']}")
    st = report["status"]
    lines.append(f"\n{paint(st, colors[st])}: {len(report['checks'])} cluster checks in {report['seconds']:.1f} s "
                 f"(exit {report['exit_code']})")
    return "\n".join(lines)


def rank_line(ctx: ClusterContext, final: dict) -> str:
    """What a rank other than 0 prints: its place and the job's status."""
    why = f"; {final['missing']}" if final.get("missing") else f"; the report is on rank 0 ({ctx.node_label(0)})"
    return (f"hal doctor: rank {ctx.rank}, {ctx.node_label(ctx.node_rank)}: {final['status']} "
            f"(exit {final['exit_code']}){why}")
