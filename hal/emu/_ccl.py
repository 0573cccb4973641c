"""``emuccl``: the emulator's collective, registered as an out-of-tree c10d backend.

Named by the plugin's ``hal_c10d_backend`` hook and registered the way vendor CCLs are
(:func:`hal.dist.register_plugin_ccl`: ``torch.distributed.Backend.register_backend`` with
``devices=["emu"]``), so ``init_process_group("cpu:gloo,emu:emuccl")`` and
``hal.dist.init()`` on the emulator take the same path as hccl or cncl.  Inside, it runs
gloo on CPU views of the emulated tensors' bytes — in place, without copies.

It serves ``ReduceOp.PREMUL_SUM`` (NCCL's op, FSDP2's after ``set_gradient_divide_factor``), which
gloo refuses, in every collective that takes an op: the inputs multiplied by the factor, then summed
(:func:`hal.dist.premultiplied`: in place where the collective writes its tensor, a copy where the
input is only read).  gloo refuses it only when the collective runs (at ``wait()``), so each call
reads its op first: ``opts.reduceOp`` compared with the op type, the one attribute read of the hot
path (torch 2.13's options are C++ objects; reading one costs a few hundred ns).
"""
from __future__ import annotations

import sys
import weakref

import torch
import torch.distributed as dist
from torch.distributed import ProcessGroupGloo
from torch._C._distributed_c10d import AllgatherOptions  # not re-exported by torch.distributed 2.13

from hal.dist import premul_sum_factor, premultiplied
from hal.emu._device import DEVICE_TYPE


_alias = None

#: id(emu tensor) -> (weak ref to it, its host view, and what the view was made from: storage, data
#: pointer, shape, strides, dtype).  A view is reused only while all of these still hold, so a
#: tensor whose storage was swapped (``set_``, ``.data =``), resized (FSDP2 frees and re-allocates
#: its unsharded parameters with ``untyped_storage().resize_``), reshaped in place or restrided
#: gets a fresh view.  An entry goes with its tensor; at most ``_VIEWS_KEPT`` are kept, oldest
#: out first, so a swapped-out storage that only its old view still holds is released by then.
_views: dict = {}
_VIEWS_KEPT = 64


def _load_alias():
    global _alias
    from hal.emu._module import _C
    _alias = _C.cpu_alias
    return _alias


def unwrap(t):
    """A CPU tensor over the bytes of emu tensor ``t`` (no copy; keeps them alive while gloo
    works); host tensors are passed as they are."""
    return t if t.is_cpu else _view(t)


def _view(t):
    """:func:`unwrap` of a tensor that is not on the host: its view, made once per tensor and
    layout (making one costs about as much as the rest of a small collective's Python path)."""
    key = id(t)
    v = _views.get(key)
    # the storage's Python object is kept in the entry, so torch hands out that same object for as
    # long as the tensor is on that storage (and comparing it is cheaper than reading an address)
    if v is not None and v[0]() is t and v[2] is t.untyped_storage() and v[3] == t.data_ptr() \
            and v[4] == t.shape and v[5] == t.stride() and v[6] is t.dtype:
        return v[1]
    if t.device.type != DEVICE_TYPE:
        return t
    host = (_alias or _load_alias())(t)
    if key not in _views and len(_views) >= _VIEWS_KEPT:
        try:
            _views.pop(next(iter(_views)), None)
        except (StopIteration, RuntimeError):  # emptied or changed by another thread meanwhile
            pass
    _views[key] = (weakref.ref(t, lambda _, key=key: _views.pop(key, None)), host,
                   t.untyped_storage(), t.data_ptr(), t.shape, t.stride(), t.dtype)
    return host


NAME = "emuccl"


def _host(tensors):
    """``tensors`` with every emu tensor replaced by its host view; the list itself where all are
    host tensors already (gloo copies the list, so it is not kept)."""
    for t in tensors:
        if not t.is_cpu:
            return [t if t.is_cpu else _view(t) for t in tensors]
    return tensors


def _host2(lists):
    return [_host(ts) for ts in lists]


_PREMUL_SUM = dist.ReduceOp.RedOpType.PREMUL_SUM


def _premul_sum(opts) -> bool:
    """True when ``opts`` (a collective's options) asks for ``PREMUL_SUM``."""
    return opts is not None and opts.reduceOp == _PREMUL_SUM


def _summing(opts):
    """A copy of ``opts`` asking for ``SUM`` (the caller's options object stays as it is)."""
    new = type(opts)()
    for name in ("timeout", "asyncOp", "rootRank", "rootTensor"):
        if hasattr(opts, name):
            setattr(new, name, getattr(opts, name))
    new.reduceOp = dist.ReduceOp.SUM
    return new


def _premultiplied(host_tensors, opts, in_place):
    """Host tensors multiplied by the factor of ``opts``'s ``PREMUL_SUM`` (a tensor factor on the
    emulator read through its host view)."""
    factor = premul_sum_factor(opts.reduceOp)
    if isinstance(factor, torch.Tensor):
        factor = unwrap(factor)
    return [premultiplied(t, factor, in_place) for t in host_tensors]


class _Gloo(ProcessGroupGloo):
    """The gloo an ``emuccl`` group runs on, as c10d sees it through ``_get_backend(device)``.

    ``split_group`` (and so ``DeviceMesh`` after ``init_process_group(device_id=...)``) deep-copies
    the parent backend's ``options`` before splitting; gloo's options cannot be copied (torch
    2.13: ``TypeError: cannot pickle '_Options' object``).  An ``emuccl`` split ignores them
    (:meth:`EmuCCL.split_group`), so this gloo reports none.  And on a bound default group,
    ``new_group`` asks the ranks outside the new group to take part in a communicator split
    (``perform_nocolor_split``, which gloo lacks: ``AttributeError``); gloo builds each group
    from the store alone, so they have nothing to do.
    """

    @property
    def options(self):
        return None

    def perform_nocolor_split(self, device):
        return None


class EmuCCL(dist.ProcessGroup):
    """A c10d process group for ``emu`` (and host) tensors; every collective runs in gloo.

    A Python c10d backend is a ``ProcessGroup`` subclass (torch uses it as the group
    itself), so one ``emuccl`` group serves both ``emu`` and ``cpu`` tensors.
    """

    def __init__(self, store, rank: int, size: int, timeout, device_id=None):
        super().__init__(rank, size)
        self._store, self._timeout = store, timeout
        self._gloo = _Gloo(store, rank, size, timeout)
        # read once: ``self.size()`` goes through c10d's Python-override lookup (about 0.6 us a
        # call), and the hot collectives call gloo's bound methods without looking them up again
        self._n = size
        self._gloo_allreduce = self._gloo.allreduce
        self._gloo_allgather_base = self._gloo._allgather_base
        self._gloo_reduce_scatter_base = self._gloo._reduce_scatter_base
        if device_id is not None:
            self.bound_device_id = device_id
        # c10d reads a group's name, its ``_get_backend(device)`` and its device binding
        # (``init_process_group(device_id=...)``, DeviceMesh, FSDP2, DTensor) from the backends
        # registered on the group; a Python group has none of its own: register the gloo it runs
        # on for both device types.  Collectives still reach this class's methods (c10d calls the
        # group's virtual methods; the functional collectives resolve the group by that name).
        for device_type, backend_type in (("cpu", dist.ProcessGroup.BackendType.GLOO),
                                          (DEVICE_TYPE, dist.ProcessGroup.BackendType.CUSTOM)):
            self._register_backend(torch.device(device_type), backend_type, self._gloo)
        # c10d names a group and (torch >= 2.15) attaches its flight recorder through the group's default
        # backend; for a group built by a backend creator c10d leaves that to the group itself
        set_default = getattr(self, "_set_default_backend", None)
        if set_default is not None:
            set_default(dist.ProcessGroup.BackendType.GLOO)

    def getBackendName(self):  # noqa: N802 - c10d's name
        return NAME

    def get_group_store(self):
        """The store this group's ranks met on (``split_group`` registers the child with it)."""
        return self._store

    def split_group(self, ranks, timeout=None, opts=None, group_name=None, group_desc=None,
                    device_types=None):
        """The ``emuccl`` group of parent ranks ``ranks`` (this rank's part of
        ``torch.distributed.split_group``), or None when this rank is not among them.

        Every member calls it with the same sorted ``ranks`` and ``group_name``, which
        prefixes the child's keys in this group's store.
        """
        if self.rank() not in ranks:
            return None
        child = EmuCCL(dist.PrefixStore(f"split/{group_name}", self._store), ranks.index(self.rank()),
                       len(ranks), timeout or self._timeout, self.bound_device_id)
        child._set_group_name(group_name)
        if group_desc:
            child._set_group_desc(group_desc)
        return child

    def allreduce(self, tensors, opts=None):
        if _premul_sum(opts):
            return self._gloo_allreduce(_premultiplied(_host(tensors), opts, True), _summing(opts))
        return self._gloo_allreduce(_host(tensors), opts or dist.AllreduceOptions())

    def allreduce_coalesced(self, tensors, opts=None):
        if _premul_sum(opts):
            return self._gloo.allreduce_coalesced(_premultiplied(_host(tensors), opts, True), _summing(opts))
        return self._gloo.allreduce_coalesced(_host(tensors), opts or dist.AllreduceCoalescedOptions())

    def broadcast(self, tensors, opts=None):
        return self._gloo.broadcast(_host(tensors), opts or dist.BroadcastOptions())

    def reduce(self, tensors, opts=None):
        if _premul_sum(opts):  # gloo writes every rank's buffer, the root's and the others': in place
            return self._gloo.reduce(_premultiplied(_host(tensors), opts, True), _summing(opts))
        return self._gloo.reduce(_host(tensors), opts or dist.ReduceOptions())

    def allgather(self, output_tensors, input_tensors, opts=None):
        return self._gloo.allgather(_host2(output_tensors), _host(input_tensors),
                                    opts or AllgatherOptions())

    def _allgather_base(self, output, input, opts=None):
        out = output if output.is_cpu else _view(output)
        inp = input if input.is_cpu else _view(input)
        opts = opts or AllgatherOptions()
        try:  # gloo takes world_size inputs concatenated along dim 0 as they are
            return self._gloo_allgather_base(out, inp, opts)
        except RuntimeError:  # raised before anything is sent, alike on every rank
            o, i = out.shape, inp.shape
            if len(o) == len(i) and i and o[0] == i[0] * self._n and (len(i) == 1 or o[1:] == i[1:]):
                raise  # gloo's own layout: its error is the user's
        # NCCL (and so torch's own callers, e.g. SyncBatchNorm) accept any contiguous output of
        # world_size * input.numel() elements, stacked too; gloo wants one slice per rank: views
        return self._gloo.allgather([[o.view(i) for o in out.view(-1).chunk(self._n)]], [inp], opts)

    def gather(self, output_tensors, input_tensors, opts=None):
        return self._gloo.gather(_host2(output_tensors), _host(input_tensors), opts or dist.GatherOptions())

    def scatter(self, output_tensors, input_tensors, opts=None):
        return self._gloo.scatter(_host(output_tensors), _host2(input_tensors), opts or dist.ScatterOptions())

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        if _premul_sum(opts):
            return self._gloo.reduce_scatter(_host(output_tensors),
                                             [_premultiplied(_host(ts), opts, False) for ts in input_tensors],
                                             _summing(opts))
        return self._gloo.reduce_scatter(_host(output_tensors), _host2(input_tensors),
                                         opts or dist.ReduceScatterOptions())

    def _reduce_scatter_base(self, output, input, opts=None):
        if _premul_sum(opts):
            return self._gloo_reduce_scatter_base(output if output.is_cpu else _view(output),
                                                  _premultiplied([unwrap(input)], opts, False)[0], _summing(opts))
        return self._gloo_reduce_scatter_base(output if output.is_cpu else _view(output),
                                              input if input.is_cpu else _view(input),
                                              opts or dist.ReduceScatterOptions())

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        return self._gloo.alltoall_base(unwrap(output), unwrap(input), output_split_sizes,
                                        input_split_sizes, opts or dist.AllToAllOptions())

    # the tensor-shaped collectives torch 2.13 calls on the group itself
    # (all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single, their coalesced forms)
    all_gather_single = _allgather_base
    reduce_scatter_single = _reduce_scatter_base
    all_to_all_single = alltoall_base

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        return _one_after_another([lambda o=o, i=i: self._allgather_base(o, i, opts)
                                   for o, i in zip(outputs, inputs)])

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        return _one_after_another([lambda o=o, i=i: self._reduce_scatter_base(o, i, opts)
                                   for o, i in zip(outputs, inputs)])

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        return self._gloo.allgather_coalesced(_host2(output_lists), _host(input_list),
                                              opts or AllgatherOptions())

    def alltoall(self, output_tensors, input_tensors, opts=None):
        return self._gloo.alltoall(_host(output_tensors), _host(input_tensors), opts or dist.AllToAllOptions())

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        return self._gloo.monitored_barrier(*(() if timeout is None else (timeout,)), wait_all_ranks)

    def barrier(self, opts=None):
        return self._gloo.barrier(opts or dist.BarrierOptions())

    def send(self, tensors, dst, tag=0):
        return self._gloo.send(_host(tensors), dst, tag)

    def recv(self, tensors, src, tag=0):
        return self._gloo.recv(_host(tensors), src, tag)

    def recv_anysource(self, tensors, tag=0):
        return self._gloo.recv_anysource(_host(tensors), tag)


def _one_after_another(calls):
    """Run collectives in order, waiting for each but the last; the last one's work."""
    work = None
    for call in calls:
        if work is not None:
            work.wait()
        work = call()
    return work


def _requested_device():
    """The ``device_id`` torch is building this group for.

    torch 2.13 binds the group it builds to ``init_process_group(device_id=...)`` (or, for
    ``new_group``, to the default group's device), then replaces that group by the backend
    when the backend is a Python ``ProcessGroup``, as ``emuccl`` is: the binding would be lost,
    and with it ``split_group``, ``barrier()``'s device and DeviceMesh's splitting.  The
    creator is not given the device, so it is read from torch's group constructor
    (``_new_process_group_helper``) on the stack; None where that frame is not found.
    """
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_new_process_group_helper":
            device = frame.f_locals.get("device_id")
            return device if isinstance(device, torch.device) else None
        frame = frame.f_back
    return None


def _create(opts, pg_options=None):
    return EmuCCL(opts.store, opts.group_rank, opts.group_size, opts.timeout, _requested_device())


def c10d_entry() -> dict:
    """What the emulator plugin's ``hal_c10d_backend`` hook returns; :func:`hal.dist.register_plugin_ccl`
    registers it (checked, once), as it registers every vendor's CCL."""
    return {"name": NAME, "creator": _create, "devices": [DEVICE_TYPE], "extended_api": True}
