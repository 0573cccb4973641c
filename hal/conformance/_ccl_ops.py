"""The c10d ops a collective library must serve, one function per op, each run twice on the
same data: on the backend under test (its device tensors, the groups its CCL builds) and on
gloo over CPU tensors, the ground truth.  :data:`CCL_OPS` is the list ``hal conformance``
holds every CCL to; ``used_by`` says which part of torch needs the op.

An op function takes a :class:`Side` and returns a (nested) list of tensors and plain values;
the two sides' results must agree (exactly for integers, to float tolerance otherwise).  It
raises :class:`OpSkip` where the op cannot apply here, with the reason.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Tuple

import torch
import torch.distributed as dist

from hal.util import accelerator


class OpSkip(Exception):
    """The op does not apply on this side; the message says why."""


@dataclass
class Side:
    """One side of a comparison: the tested CCL on ``device``, or gloo on the CPU (``reference``)."""

    device: torch.device
    reference: bool
    world: object          # the whole-job group this side runs on
    rank: int
    size: int
    bound_device: object = None   # what the tested side passed as init_process_group(device_id=)
    note: str = ""                # what the op reports beside its verdict (set by the op)
    _groups: Dict[tuple, object] = field(default_factory=dict)

    def t(self, values, dtype=torch.float32) -> torch.Tensor:
        return torch.tensor(values, dtype=dtype, device=self.device)

    def full(self, n: int, value, dtype=torch.float32) -> torch.Tensor:
        return torch.full((n,), value, dtype=dtype, device=self.device)

    def group_of(self, partition, **kwargs):
        """The group of ``partition`` (a list of rank lists) that holds this rank, made with
        ``new_group`` on this side's backend (every rank creates every group, in order)."""
        mine = None
        for ranks in partition:
            g = (reference_group(ranks, **kwargs) if self.reference else dist.new_group(ranks, **kwargs))
            if self.rank in ranks:
                mine = g
        return mine

    def split(self, partition):
        """``split_group`` on the tested side; ``new_group`` of the same ranks on gloo."""
        if self.reference:
            return self.group_of(partition)
        if not accelerator.is_available():
            raise OpSkip("torch 2.13's split_group needs an accelerator (torch.accelerator.is_available() "
                         "is False on a CPU-only build) and raises 'No backend for the parent process group "
                         "or its backend does not support splitting'; new_group serves the CPU")
        return dist.split_group(split_ranks=partition)


def reference_group(ranks=None, **kwargs):
    """A gloo group over ``ranks`` beside a default group bound to an accelerator.

    torch 2.13's ``new_group`` binds every new group to the default group's device and then
    asks the new group's backend for that device (``_get_backend(device_id)``), which a gloo
    group without that device type lacks; the binding is lifted while gloo's group is made.
    """
    default = dist.group.WORLD
    bound = default.bound_device_id
    default.bound_device_id = None
    try:
        return dist.new_group(ranks, backend="gloo", **kwargs)
    finally:
        default.bound_device_id = bound


def _ring(s: Side) -> Tuple[int, int]:
    return (s.rank + 1) % s.size, (s.rank - 1) % s.size


def all_reduce(s: Side):
    out = []
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.MIN, dist.ReduceOp.PRODUCT):
        for dtype in (torch.float32, torch.int64):
            t = s.t([s.rank + 1, 2 - s.rank, 3 * s.rank - 1], dtype)
            dist.all_reduce(t, op=op, group=s.world)
            out.append(t)
    t = s.t([0.5 * (s.rank + 1)] * 5, torch.bfloat16)
    dist.all_reduce(t, group=s.world)
    return out + [t]


def broadcast(s: Side):
    t = s.t([10.0 * s.rank + i for i in range(4)])
    dist.broadcast(t, src=s.size - 1, group=s.world)
    return [t]


def reduce(s: Side):
    t = s.t([float(s.rank + i) for i in range(3)])
    dist.reduce(t, dst=0, group=s.world)
    return [t] if s.rank == 0 else []


def all_gather(s: Side):
    outs = [s.full(3, -1.0) for _ in range(s.size)]
    dist.all_gather(outs, s.t([s.rank, s.rank + 0.5, -s.rank]), group=s.world)
    return outs


def gather_scatter(s: Side):
    inp = s.t([float(s.rank)] * 2)
    gathered = [s.full(2, -1.0) for _ in range(s.size)] if s.rank == 0 else None
    dist.gather(inp, gathered, dst=0, group=s.world)
    out = s.full(3, -1.0)
    chunks = [s.t([10.0 * r + i for i in range(3)]) for r in range(s.size)] if s.rank == 0 else None
    dist.scatter(out, chunks, src=0, group=s.world)
    return (gathered or []) + [out]


def all_gather_into_tensor(s: Side):
    flat = s.full(4 * s.size, -1.0)
    dist.all_gather_into_tensor(flat, torch.arange(4.0, device=s.device) + 10 * s.rank, group=s.world)
    rows = torch.full((2 * s.size, 3), -1.0, device=s.device)
    dist.all_gather_into_tensor(rows, s.t([[s.rank * 10.0 + i for i in range(3)]] * 2), group=s.world)
    return [flat, rows]


def reduce_scatter_tensor(s: Side):
    inp = torch.arange(4.0 * s.size, device=s.device) * (s.rank + 1)
    out = s.full(4, -1.0)
    dist.reduce_scatter_tensor(out, inp, group=s.world)
    mx = s.full(4, -1.0)
    dist.reduce_scatter_tensor(mx, inp - 3 * s.rank, op=dist.ReduceOp.MAX, group=s.world)
    return [out, mx]


def reduce_scatter(s: Side):
    out = s.full(2, -1.0)
    dist.reduce_scatter(out, [s.t([r + s.rank, r * s.rank]) for r in range(s.size)], group=s.world)
    return [out]


def all_to_all(s: Side):
    outs = [s.full(2, -1.0) for _ in range(s.size)]
    dist.all_to_all(outs, [s.t([10.0 * s.rank + r, r]) for r in range(s.size)], group=s.world)
    return outs


def all_to_all_single_uneven(s: Side):
    # rank r sends r + j + 1 elements to rank j (so it receives j + r + 1 from rank j)
    send = [s.rank + j + 1 for j in range(s.size)]
    recv = [j + s.rank + 1 for j in range(s.size)]
    inp = torch.cat([s.full(n, 100.0 * s.rank + j) for j, n in enumerate(send)])
    out = s.full(sum(recv), -1.0)
    dist.all_to_all_single(out, inp, output_split_sizes=recv, input_split_sizes=send, group=s.world)
    even = s.full(s.size * 2, -1.0)
    dist.all_to_all_single(even, torch.arange(2.0 * s.size, device=s.device) + 10 * s.rank, group=s.world)
    return [out, even]


def _coalesced(s: Side, issue):
    """``issue()``'s collectives inside ``_coalescing_manager`` (its fast path, one coalesced
    call to the group, as FSDP and DDP use it) on the tested side; one by one on gloo."""
    if s.reference:
        return issue()
    with dist._coalescing_manager(group=s.world, async_ops=True) as cm:
        outs = issue()
    cm.wait()
    return outs


def coalesced_all_gather_into_tensor(s: Side):
    def issue():
        outs = []
        for n in (3, 5):
            out = s.full(n * s.size, -1.0)
            dist.all_gather_into_tensor(out, s.full(n, s.rank + n / 10), group=s.world)
            outs.append(out)
        return outs
    return _coalesced(s, issue)


def coalesced_reduce_scatter_tensor(s: Side):
    def issue():
        outs = []
        for n in (2, 4):
            out = s.full(n, -1.0)
            dist.reduce_scatter_tensor(out, torch.arange(n * s.size, dtype=torch.float32, device=s.device)
                                       * (s.rank + 1), group=s.world)
            outs.append(out)
        return outs
    return _coalesced(s, issue)


def coalesced_all_reduce(s: Side):
    def issue():
        ts = [s.full(n, float(s.rank + n)) for n in (2, 7)]
        for t in ts:
            dist.all_reduce(t, group=s.world)
        return ts
    return _coalesced(s, issue)


def all_gather_and_reduce_coalesced(s: Side):
    ts = [s.full(3, s.rank + 1.0), s.full(1, 2.0 * s.rank)]
    dist.all_reduce_coalesced(ts, group=s.world)
    outs = [[s.full(2, -1.0), s.full(1, -1.0)] for _ in range(s.size)]
    dist.all_gather_coalesced(outs, [s.full(2, float(s.rank)), s.full(1, s.rank + 0.25)], group=s.world)
    return ts + [t for per_rank in outs for t in per_rank]


#: PREMUL_SUM factors: one every rank shares, one per rank (given as a tensor on the tested side);
#: powers of two, so that the integer-valued data stays exact in any summation order
_FACTORS = ((lambda rank: 0.5, False), (lambda rank: 0.25 * (rank + 1), True))


def _premul(s: Side, data, factor: float, as_tensor: bool = False):
    """``(data, op)`` for a ``ReduceOp.PREMUL_SUM(factor)`` collective over ``data`` (a tensor or a
    list): on the tested side the data as it is and NCCL's op (the factor a float, or a scalar tensor
    on the side's device); on gloo, which has no such op, the plain computation: a multiplied copy of
    the data, summed."""
    if s.reference:
        scaled = data * factor if isinstance(data, torch.Tensor) else [d * factor for d in data]
        return scaled, dist.ReduceOp.SUM
    return data, dist.ReduceOp.PREMUL_SUM(torch.tensor(factor, device=s.device) if as_tensor else factor)


def _wait(work):
    if work is not None:
        work.wait()


def premul_sum_all_reduce(s: Side):
    out = []
    for factor, as_tensor in _FACTORS:
        for async_op in (False, True):
            t, op = _premul(s, s.t([s.rank + 1, 2 - s.rank, 3 * s.rank - 1, 4]), factor(s.rank), as_tensor)
            _wait(dist.all_reduce(t, op=op, group=s.world, async_op=async_op))
            out.append(t)
    t, op = _premul(s, s.t([2 * s.rank + 1] * 5, torch.bfloat16), 0.5)
    dist.all_reduce(t, op=op, group=s.world)
    return out + [t]


def premul_sum_reduce(s: Side):
    out = []
    for factor, as_tensor in _FACTORS:
        t, op = _premul(s, s.t([float(s.rank + i) for i in range(3)]), factor(s.rank), as_tensor)
        dist.reduce(t, dst=0, op=op, group=s.world)
        out += [t] if s.rank == 0 else []
    return out


def premul_sum_reduce_scatter_tensor(s: Side):
    """Async, as FSDP2 issues it; the input is the caller's and must be left as it was."""
    out = []
    for factor, as_tensor in _FACTORS:
        inp = torch.arange(4.0 * s.size, device=s.device) * (s.rank + 1)
        data, op = _premul(s, inp, factor(s.rank), as_tensor)
        res = s.full(4, -1.0)
        _wait(dist.reduce_scatter_tensor(res, data, op=op, group=s.world, async_op=True))
        out += [res, inp]
    return out


def premul_sum_reduce_scatter(s: Side):
    out = []
    for factor, as_tensor in _FACTORS:
        ins = [s.t([r + s.rank, r * s.rank, 3.0]) for r in range(s.size)]
        data, op = _premul(s, ins, factor(s.rank), as_tensor)
        res = s.full(3, -1.0)
        dist.reduce_scatter(res, data, op=op, group=s.world)
        out += [res] + ins
    return out


def premul_sum_coalesced(s: Side):
    def issue():
        outs = []
        for n in (2, 4):
            out = s.full(n, -1.0)
            data, op = _premul(s, torch.arange(n * s.size, dtype=torch.float32, device=s.device) * (s.rank + 1), 0.5)
            dist.reduce_scatter_tensor(out, data, op=op, group=s.world)
            outs.append(out)
        return outs

    def issue_all_reduce():
        ts = []
        for n in (2, 7):
            t, op = _premul(s, s.full(n, float(s.rank + n)), 0.25)
            dist.all_reduce(t, op=op, group=s.world)
            ts.append(t)
        return ts
    ts, op = _premul(s, [s.full(3, s.rank + 1.0), s.full(1, 2.0 * s.rank)], 0.5)
    dist.all_reduce_coalesced(ts, op=op, group=s.world)
    return _coalesced(s, issue) + _coalesced(s, issue_all_reduce) + ts


def avg(s: Side):
    """``ReduceOp.AVG`` on the tested side; on gloo, the plain computation: SUM, then / world size."""
    op = dist.ReduceOp.SUM if s.reference else dist.ReduceOp.AVG
    t = s.t([s.rank + 1, 2 - s.rank, 3 * s.rank - 1, 4])
    dist.all_reduce(t, op=op, group=s.world)
    r = s.t([float(s.rank + i) for i in range(3)])
    dist.reduce(r, dst=0, op=op, group=s.world)
    rs = s.full(5, -1.0)
    _wait(dist.reduce_scatter_tensor(rs, torch.arange(5.0 * s.size, device=s.device) * (s.rank + 1), op=op,
                                     group=s.world, async_op=True))
    rl = s.full(2, -1.0)
    dist.reduce_scatter(rl, [s.t([r + s.rank, r * s.rank]) for r in range(s.size)], op=op, group=s.world)
    ts = [s.full(3, s.rank + 1.0), s.full(1, 2.0 * s.rank)]
    dist.all_reduce_coalesced(ts, op=op, group=s.world)

    def issue():
        outs = [s.full(n, -1.0) for n in (2, 3)]
        for o in outs:
            dist.reduce_scatter_tensor(o, torch.arange(o.numel() * s.size, dtype=torch.float32, device=s.device)
                                       + s.rank, op=op, group=s.world)
        return outs
    out = [t] + ([r] if s.rank == 0 else []) + [rs, rl] + ts + _coalesced(s, issue)
    return [x / s.size for x in out] if s.reference else out


def send_recv(s: Side):
    nxt, prv = _ring(s)
    got = s.full(3, -1.0)
    mine = s.t([s.rank, s.rank * 2.0, 7.0])
    if s.rank % 2 == 0:
        dist.send(mine, dst=nxt, group=s.world)
        dist.recv(got, src=prv, group=s.world)
    else:
        dist.recv(got, src=prv, group=s.world)
        dist.send(mine, dst=nxt, group=s.world)
    return [got]


def isend_irecv(s: Side):
    nxt, prv = _ring(s)
    got = s.full(4, -1.0)
    works = [dist.isend(s.full(4, 3.0 * s.rank), dst=nxt, group=s.world),
             dist.irecv(got, src=prv, group=s.world)]
    for w in works:
        w.wait()
    return [got]


def batch_isend_irecv(s: Side):
    nxt, prv = _ring(s)
    got_next, got_prev = s.full(2, -1.0), s.full(2, -1.0)
    ops = [dist.P2POp(dist.isend, s.full(2, s.rank + 0.5), nxt, s.world),
           dist.P2POp(dist.irecv, got_prev, prv, s.world),
           dist.P2POp(dist.isend, s.full(2, s.rank - 0.5), prv, s.world),
           dist.P2POp(dist.irecv, got_next, nxt, s.world)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    return [got_prev, got_next]


def broadcast_subgroup(s: Side):
    last = s.size - 1
    pair = s.group_of([[0, last]])
    singles = s.group_of([[r] for r in range(s.size)])
    out = []
    if pair is not None:
        t = s.full(3, float(s.rank))
        dist.broadcast(t, src=last, group=pair)           # a global source rank
        u = s.full(3, 5.0 * s.rank)
        dist.broadcast(u, group=pair, group_src=0)       # a group-local source rank
        out += [t, u]
    t = s.full(2, s.rank + 0.5)
    dist.broadcast(t, src=s.rank, group=singles)
    return out + [t]


def barrier_device_ids(s: Side):
    if s.reference:
        dist.barrier(group=s.world)
    elif s.device.type == "cpu":
        dist.barrier(group=s.world, device_ids=[0])
    else:
        dist.barrier(group=s.world, device_ids=[s.device.index])
    t = s.full(1, 1.0)
    dist.all_reduce(t, group=s.world)
    return [t]


def _funcol_step(group):
    import torch.distributed._functional_collectives as funcol

    def step(x):
        a = funcol.all_reduce(x * 2, "sum", group)
        g = funcol.all_gather_tensor(x + 1, 0, group)
        r = funcol.reduce_scatter_tensor(g, "sum", 0, group)
        t = funcol.all_to_all_single(g, None, None, group)
        return a, g, r, t
    return step


def _funcol_input(s: Side):
    return (torch.arange(4.0, device=s.device) + 10 * s.rank).view(2, 2)


def functional(s: Side):
    return list(_funcol_step(s.world)(_funcol_input(s)))


def functional_compiled(s: Side):
    """The functional collectives inside ``torch.compile(fullgraph=True)`` on the tested side;
    eager gloo is the reference."""
    from hal.redirect import inductor_supports

    step = _funcol_step(s.world)
    if not s.reference:
        # inductor where it generates code for the device, else the graph capture alone
        backend = "inductor" if inductor_supports(s.device.type) else "aot_eager"
        s.note = f"torch.compile(backend={backend!r}, fullgraph=True)"
        torch._dynamo.reset()
        step = torch.compile(step, backend=backend, fullgraph=True)
    return list(step(_funcol_input(s)))


def named_group(s: Side):
    from torch.distributed.distributed_c10d import _resolve_process_group
    import torch.distributed._functional_collectives as funcol

    g = s.group_of([list(range(s.size))], group_desc="hal_conformance")
    t = funcol.all_reduce(s.full(2, s.rank + 1.0), "sum", g.group_name)
    return [_resolve_process_group(g.group_name) is g, g.group_desc.startswith("hal_conformance"),
            funcol.wait_tensor(t)]


def new_group(s: Side):
    out = []
    for partition in ([list(range(s.size))], [[r] for r in range(s.size)], [list(range(s.size))[::-1]]):
        g = s.group_of(partition)
        t = s.full(2, s.rank + 1.0)
        dist.all_reduce(t, group=g)
        out += [t, dist.get_world_size(g), dist.get_rank(g)]
    return out


def split_group(s: Side):
    out = []
    for partition in ([list(range(s.size))], [[r] for r in range(s.size)]):
        g = s.split(partition)
        t = s.full(3, s.rank + 2.0)
        dist.all_reduce(t, group=g)
        b = s.full(1, float(s.rank))
        dist.broadcast(b, group=g, group_src=0)
        out += [t, b, dist.get_world_size(g)]
    return out


def _mesh_shape(size: int) -> Tuple[int, int]:
    return (2, size // 2) if size % 2 == 0 else (size, 1)


def device_mesh(s: Side):
    """A 2-D ``DeviceMesh`` ("dp", "tp") on the tested side and its 1-D sub-meshes; on gloo, the
    groups of the same layout (rank r at row r // cols, column r % cols) made by hand."""
    rows, cols = _mesh_shape(s.size)
    if s.reference:
        dp = s.group_of([[c + cols * k for k in range(rows)] for c in range(cols)])
        tp = s.group_of([[row * cols + c for c in range(cols)] for row in range(rows)])
        coords = [s.rank // cols, s.rank % cols]
    else:
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh(s.device.type, (rows, cols), mesh_dim_names=("dp", "tp"))
        dp, tp = mesh["dp"].get_group(), mesh["tp"].get_group()
        coords = [mesh.get_local_rank("dp"), mesh.get_local_rank("tp")]
    out = [coords]
    for g in (dp, tp):
        t = s.full(2, s.rank + 1.0)
        dist.all_reduce(t, group=g)
        gathered = s.full(2 * dist.get_world_size(g), -1.0)
        dist.all_gather_into_tensor(gathered, s.full(2, float(s.rank)), group=g)
        out += [t, gathered]
    return out


def eager_init(s: Side):
    """``init_process_group(device_id=...)`` binds the default group to that device."""
    if s.bound_device is None:
        raise OpSkip(f"init_process_group takes device_id only for an accelerator; {s.device.type} has none")
    if s.reference:
        return [str(s.bound_device)]
    bound = getattr(dist.group.WORLD, "bound_device_id", None)
    return [str(bound)]


#: (id, who needs it, function), in the order the ops run; every op is compared with gloo
CCL_OPS: Tuple[Tuple[str, str, Callable[[Side], List]], ...] = (
    ("eager_init", "init_process_group(device_id=): the group is bound to the device", eager_init),
    ("all_reduce", "DDP, HSDP, loss parallel (sum/max/min/product; float32, int64, bfloat16)", all_reduce),
    ("broadcast", "DDP's initial sync, DCP", broadcast),
    ("reduce", "metrics, DCP", reduce),
    ("all_gather", "DTensor full_tensor, metrics", all_gather),
    ("gather_scatter", "object collectives, DCP", gather_scatter),
    ("all_gather_into_tensor", "FSDP2's unshard, DTensor", all_gather_into_tensor),
    ("reduce_scatter_tensor", "FSDP2's gradient reduction, sequence parallel", reduce_scatter_tensor),
    ("reduce_scatter", "list form", reduce_scatter),
    ("all_to_all", "list form", all_to_all),
    ("all_to_all_single_uneven", "DTensor redistribute, MoE dispatch (uneven splits)", all_to_all_single_uneven),
    ("coalesced_all_gather_into_tensor", "_coalescing_manager around all_gather_into_tensor",
     coalesced_all_gather_into_tensor),
    ("coalesced_reduce_scatter_tensor", "_coalescing_manager around reduce_scatter_tensor",
     coalesced_reduce_scatter_tensor),
    ("coalesced_all_reduce", "_coalescing_manager around all_reduce", coalesced_all_reduce),
    ("all_gather_and_reduce_coalesced", "all_reduce_coalesced, all_gather_coalesced",
     all_gather_and_reduce_coalesced),
    ("premul_sum_all_reduce", "NCCL's ReduceOp.PREMUL_SUM: a factor shared and one per rank (a tensor), "
     "async too, bfloat16", premul_sum_all_reduce),
    ("premul_sum_reduce", "ReduceOp.PREMUL_SUM at reduce", premul_sum_reduce),
    ("premul_sum_reduce_scatter_tensor", "FSDP2's gradient reduction after set_gradient_divide_factor "
     "(async; the input left as it was)", premul_sum_reduce_scatter_tensor),
    ("premul_sum_reduce_scatter", "ReduceOp.PREMUL_SUM at the list form (inputs left as they were)",
     premul_sum_reduce_scatter),
    ("premul_sum_coalesced", "ReduceOp.PREMUL_SUM in _coalescing_manager and all_reduce_coalesced",
     premul_sum_coalesced),
    ("avg", "ReduceOp.AVG (FSDP2's default reduce-scatter op) in every collective that takes an op", avg),
    ("send_recv", "pipeline parallel (blocking p2p)", send_recv),
    ("isend_irecv", "pipeline parallel (async p2p)", isend_irecv),
    ("batch_isend_irecv", "torch.distributed.pipelining's schedules", batch_isend_irecv),
    ("broadcast_subgroup", "broadcast on sub-groups (global and group-local source)", broadcast_subgroup),
    ("barrier_device_ids", "barrier(device_ids=[local device])", barrier_device_ids),
    ("named_group", "group_desc, a group resolved by its name (functional collectives)", named_group),
    ("new_group", "new_group: whole, singletons, reversed rank order", new_group),
    ("split_group", "split_group (DeviceMesh after eager init)", split_group),
    ("device_mesh", "init_device_mesh 2-D (dp, tp) and its sub-meshes", device_mesh),
    ("functional", "torch.distributed._functional_collectives, eager", functional),
    ("functional_compiled", "functional collectives under torch.compile(fullgraph=True)", functional_compiled),
)


def flatten(value) -> list:
    """A result as a flat list of CPU tensors and plain values (for comparison and reports)."""
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in flatten(v)]
    if isinstance(value, torch.Tensor):
        return [value.detach().cpu()]
    return [value]


def disagreement(tested, reference) -> str:
    """Where the tested side's result differs from gloo's, or "" when they agree."""
    a, b = flatten(tested), flatten(reference)
    if len(a) != len(b):
        return f"returned {len(a)} values, gloo {len(b)}"
    for i, (x, y) in enumerate(zip(a, b)):
        if isinstance(y, torch.Tensor):
            if not isinstance(x, torch.Tensor):
                return f"value {i}: {x!r} where gloo gives a tensor"
            if x.dtype != y.dtype or x.shape != y.shape:
                return f"value {i}: {x.dtype} {list(x.shape)}, gloo {y.dtype} {list(y.shape)}"
            try:
                torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6)
            except AssertionError:
                return f"value {i}: {_short(x)}, gloo {_short(y)}"
        elif x != y:
            return f"value {i}: {x!r}, gloo {y!r}"
    return ""


def _short(t: torch.Tensor) -> str:
    return str(t.flatten()[:8].tolist()) + ("..." if t.numel() > 8 else "")


def op_ids() -> list:
    """Ids of every op of the list, in the order they run."""
    return [o[0] for o in CCL_OPS]
