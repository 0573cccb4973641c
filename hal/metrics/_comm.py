"""Communication time of a training job, measured by hal on every backend.

Each collective is an interval from its issue to its completion: the completion is the
callback of the collective's ``Work.get_future()``, which every c10d backend provides (gloo,
the emulator's ``emuccl``, NCCL and the vendors' CCLs alike).  Where the collective's
tensors are on the host the clock is the host's (``time.perf_counter``); where they are on
a device the two ends are device events (``torch.Event``), recorded on the stream that
issues the collective and on the stream its completion is visible on, so a CCL that runs
asynchronously on the device is timed on the device and not at its host enqueue.

*Exposed* communication is the part that the training itself waited for:

- a ``Work.wait()`` (FSDP2's all-gathers and reduce-scatters, a user's async collective):
  from the wait to the completion; on the host that is the time the thread was blocked;
  on a device, from where the waiting stream was when it reached the wait to the
  collective's completion (0 when it had already finished);
- a synchronous collective (``async_op=False``): all of it;
- DDP's gradient all-reduce: from the launch of the last bucket of a backward pass (when
  the backward computation of the earliest layers has finished) to the completion of the
  last bucket, since DDP's backward ends waiting for every bucket.  The buckets of one
  backward pass are those issued within one autograd graph task.

DDP's buckets are timed where the process group is a Python c10d backend (the emulator's
``emuccl``, a vendor CCL written in Python): its ``allreduce``, which DDP's reducer calls,
is wrapped on the group object, so DDP keeps its own arithmetic (with no comm hook it divides
each gradient while copying it into its bucket, one pass; any comm hook needs a second).
A group of a C++ backend (gloo, NCCL, the vendors' CCLs) cannot be wrapped from Python:
there a comm hook issues the same all-reduce and times it.

Per window (one ``MetricsLogger.log_step`` to the next): ``comm_time_s`` is the union of
the collectives' intervals (overlapping collectives count once), ``comm_exposed_s`` the
union of the exposed intervals, with the count and bytes of the collectives completed.
"""
from __future__ import annotations

import threading
import time
from typing import List, Optional, Tuple

from hal._errors import HalError

#: the torch.distributed functions FSDP2 (and most user code) issues collectives through
WRAPPED = ("all_gather_single", "all_gather_into_tensor", "reduce_scatter_single", "reduce_scatter_tensor",
           "all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all_single")


def union_length(intervals) -> float:
    """Total length of the union of ``(start, end)`` intervals (overlaps counted once)."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted((s, e) for s, e in intervals if e > s):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    if cur_e is not None:
        total += cur_e - cur_s
    return total


class _Clock:
    """A point in time on the host (a float) or on a device (a timing event), read later."""

    @staticmethod
    def now(tensor=None):
        if tensor is None or tensor.device.type == "cpu":
            return time.perf_counter()
        import torch
        ev = torch.Event(device=tensor.device, enable_timing=True)
        ev.record()
        return ev


def _seconds(points) -> List[Optional[float]]:
    """Host floats as they are; device events as seconds after the first event among them."""
    ref, out = None, []
    for p in points:
        if p is None or isinstance(p, float):
            out.append(p)
            continue
        p.synchronize()
        if ref is None:
            ref = p
        out.append(ref.elapsed_time(p) / 1e3)
    return out


class _Op:
    """One collective: issue, completion, the exposed start (None: nothing waited) and its bytes."""
    __slots__ = ("t0", "t1", "wait0", "wait1", "nbytes", "task", "device")

    def __init__(self, t0, nbytes, device, task=None):
        self.t0, self.t1, self.wait0, self.wait1 = t0, None, None, None
        #: a DDP bucket's autograd graph task (its backward pass); None for other collectives
        self.nbytes, self.task, self.device = nbytes, task, device


class CommWatch:
    """Times the collectives of a DDP or FSDP2 module (see the module docstring).

    Made by :meth:`hal.metrics.MetricsLogger.watch`; :meth:`take` returns the window's
    figures.  :meth:`close` removes what it installed (the FSDP2 wrappers, a DDP group's
    timed ``allreduce``; a DDP comm hook stays registered, since DDP allows one registration,
    and goes on with the inner hook alone).
    """

    def __init__(self, model):
        from torch.nn.parallel import DistributedDataParallel
        self.kind = None
        self._ops: List[_Op] = []
        self._lock = threading.Lock()
        self._active, self._closed = True, False
        if isinstance(model, DistributedDataParallel):
            self.kind = "ddp"
            self._watch_ddp(model)
        elif _is_fsdp2(model):
            self.kind = "fsdp2"
            _install(self)
        else:
            raise HalError(f"watch({type(model).__name__}): not a DistributedDataParallel module nor one with "
                           "torch.distributed.fsdp.fully_shard applied; watch the wrapped model (the object "
                           "DistributedDataParallel(...) or fully_shard(...) returned)")

    @staticmethod
    def watched(model) -> bool:
        """True when a DDP ``model`` is watched already (by the script's own MetricsLogger)."""
        return getattr(model, "_hal_comm_watch", None) is not None

    # -- DDP -------------------------------------------------------------------------------
    def _watch_ddp(self, ddp) -> None:
        if self.watched(ddp):
            raise HalError("watch(model): this DistributedDataParallel module is watched already; one "
                           "MetricsLogger.watch per model")
        ddp._hal_comm_watch = self
        if _python_group(ddp.process_group):
            self._group = ddp.process_group
            self._params = {id(p) for p in ddp.parameters()}
            _GroupTimer.attach(self)
        else:
            self._group = None
            self._watch_ddp_hook(ddp)

    def _watch_ddp_hook(self, ddp) -> None:
        """DDP on a C++ backend: a comm hook issues each bucket's all-reduce and times it."""
        import torch.distributed.distributed_c10d as c10d
        if getattr(ddp, "_comm_hooks", None):
            raise HalError("watch(model): the model has a comm hook registered already, and DDP takes one "
                           "registration; call metrics.watch(model) first, then model.register_comm_hook(...): "
                           "the watch then times your hook's future")
        inner = {"hook": None, "state": None}
        watch = self

        def hook(state, bucket):
            tensor = bucket.buffer()
            user = inner["hook"]
            t0 = _Clock.now(tensor) if watch._active else None
            if user is not None:
                fut = user(inner["state"], bucket)
            else:  # DDP's own: the bucket averaged by one all-reduce, scaled as DDP scales it (by 1/n)
                group = state if state is not None else c10d.group.WORLD
                tensor.mul_(1.0 / group.size())
                fut = group.allreduce([tensor]).get_future()
            if t0 is None:
                return fut if user is not None else fut.then(_first)
            op = _Op(t0, tensor.numel() * tensor.element_size(), tensor.device.type != "cpu", _graph_task())
            watch._add(op)

            def done(f):
                op.t1 = _Clock.now(tensor)
                return f.value() if user is not None else f.value()[0]

            # a future DDP waits for, so the completion is recorded before the backward pass returns
            # (and a Python hook's future must hold the tensor itself, not the all-reduce's [tensor])
            return fut.then(done)

        ddp.register_comm_hook(ddp.process_group, hook)

        def register_comm_hook(state, hook_fn):
            """DDP's register_comm_hook, composed with hal.metrics' timing (DDP takes one hook)."""
            if inner["hook"] is not None:
                raise HalError("register_comm_hook: a comm hook is registered already (DDP takes one)")
            ddp._check_comm_hook(hook_fn)
            inner["hook"], inner["state"] = hook_fn, state

        ddp.register_comm_hook = register_comm_hook

    # -- function wrappers (FSDP2, and any collective issued through torch.distributed) ----
    def _around(self, fn, args, kwargs):
        tensor = _first_tensor(args, kwargs)
        args, kwargs, wants_async = _async_op(fn, args, kwargs)
        t0 = _Clock.now(tensor)
        work = fn(*args, async_op=True, **kwargs)
        op = _Op(t0, _nbytes(args, kwargs), tensor is not None and tensor.device.type != "cpu")
        self._add(op)
        if work is None:  # this rank is not in the group
            op.t1 = op.t0
            return None
        if not wants_async:  # waited for at once, all of it exposed: no completion callback needed
            work.wait()
            end = _Clock.now(tensor)
            op.wait0, op.wait1 = op.t0, end
            op.t1 = end  # last: take() counts the collective once this is set
            return None
        # an async collective's completion is the future's callback: it runs on the CCL's thread
        # and takes the GIL there, so only collectives whose wait may come late get one
        try:
            fut = work.get_future()
        except RuntimeError:  # a backend without futures: completion seen at the wait only
            fut = None
        if fut is not None:
            def done(f):
                if op.t1 is None:
                    op.t1 = _Clock.now(tensor)
            fut.add_done_callback(done)
        return _TimedWork(work, op, tensor)

    def _add(self, op: _Op) -> None:
        with self._lock:
            self._ops.append(op)

    def take(self) -> dict:
        """The window's ``comm_time_s``, ``comm_exposed_s``, ``comm_count``, ``comm_bytes``;
        collectives still in flight stay for the next window."""
        with self._lock:
            done = [op for op in self._ops if op.t1 is not None]
            self._ops = [op for op in self._ops if op.t1 is None]
        comm, exposed = {False: [], True: []}, {False: [], True: []}
        nbytes = 0
        for dev in (False, True):
            ops = [op for op in done if op.device == dev]
            if not ops:
                continue
            flat = []
            for op in ops:
                flat += [op.t0, op.t1, op.wait0, op.wait1]
            secs = _seconds(flat)
            tasks: dict = {}
            for i, op in enumerate(ops):
                t0, t1, w0, w1 = secs[4 * i: 4 * i + 4]
                comm[dev].append((t0, t1))
                nbytes += op.nbytes
                if w0 is not None:
                    exposed[dev].append((w0, w1 if w1 is not None and w1 < t1 else t1))
                if op.task is not None:  # DDP: from the last bucket's launch to the latest completion
                    last = tasks.get(op.task)
                    tasks[op.task] = (t0, t1) if last is None else (max(last[0], t0), max(last[1], t1))
            exposed[dev] += tasks.values()
        return {"comm_time_s": sum(union_length(comm[d]) for d in comm),
                "comm_exposed_s": sum(union_length(exposed[d]) for d in exposed),
                "comm_count": len(done), "comm_bytes": nbytes}

    def pause(self) -> None:
        """Stop timing until :meth:`resume` (an evaluation pass, a step to leave out): what
        the watch installed is removed meanwhile, except a DDP comm hook, which DDP keeps
        (it then issues the all-reduce untimed)."""
        if self._active and self.kind == "fsdp2":
            _uninstall(self)
        if self._active and getattr(self, "_group", None) is not None:
            _GroupTimer.detach(self)
        self._active = False

    def resume(self) -> None:
        """Time again after :meth:`pause` (no-op while timing)."""
        if self._active or self._closed:
            return
        if self.kind == "fsdp2":
            _install(self)
        if getattr(self, "_group", None) is not None:
            _GroupTimer.attach(self)
        self._active = True

    def close(self) -> None:
        """Stop timing for good (FSDP2: remove the function wrappers when no other watch needs them)."""
        self.pause()
        self._closed = True


def _first(fut):
    return fut.value()[0]


def _graph_task():
    """The autograd graph task (backward pass) running on this thread, None outside one."""
    import torch
    task = torch._C._current_graph_task_id()
    return None if task < 0 else task


def _python_group(group) -> bool:
    """Whether ``group`` is a Python c10d backend, whose ``allreduce`` DDP's reducer reaches
    through Python (and so can be wrapped on the object)."""
    import inspect
    return inspect.isfunction(getattr(type(group), "allreduce", None))


class _GroupTimer:
    """The timed ``allreduce`` of a Python process group, shared by the DDP watches on it.

    DDP's reducer issues a bucket's all-reduce from the autograd hook of the parameter that
    made the bucket ready, so the autograd node running then (that parameter's
    ``AccumulateGrad``) names the model; a bucket issued from elsewhere in a backward pass
    (DDP's end-of-backward callback) goes to the group's only watch, if it has one.
    All-reduces outside a backward pass (a loss average of the user's) are not DDP's: untimed.
    """

    def __init__(self, group):
        self.group, self.watches = group, []
        self.inner = group.allreduce

        def allreduce(tensors, opts=None):
            task = _graph_task() if self.watches else None
            if task is None:
                return self.inner(tensors, opts)
            watch = self.owner()
            if watch is None:
                return self.inner(tensors, opts)
            tensor = tensors[0]
            t0 = _Clock.now(tensor)
            work = self.inner(tensors, opts)
            op = _Op(t0, sum(t.numel() * t.element_size() for t in tensors), tensor.device.type != "cpu", task)
            watch._add(op)

            def done(_):
                op.t1 = _Clock.now(tensor)
            work.get_future().add_done_callback(done)
            return work

        self.allreduce = allreduce

    def owner(self) -> Optional["CommWatch"]:
        import torch
        var = getattr(torch._C._current_autograd_node(), "variable", None)
        if var is not None:
            for w in self.watches:
                if id(var) in w._params:
                    return w
            return None
        return self.watches[0] if len(self.watches) == 1 else None

    @staticmethod
    def attach(watch: "CommWatch") -> None:
        group = watch._group
        with _install_lock:
            timer = getattr(group, "_hal_group_timer", None)
            if timer is None:
                timer = _GroupTimer(group)
                group._hal_group_timer = timer
                group.allreduce = timer.allreduce
            timer.watches.append(watch)

    @staticmethod
    def detach(watch: "CommWatch") -> None:
        group = watch._group
        with _install_lock:
            timer = getattr(group, "_hal_group_timer", None)
            if timer is None or watch not in timer.watches:
                return
            timer.watches.remove(watch)
            if not timer.watches:
                del group.allreduce, group._hal_group_timer


def _is_fsdp2(model) -> bool:
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:
        return False
    return any(isinstance(m, FSDPModule) for m in model.modules())


def _tensors(args, kwargs):
    import torch
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (list, tuple)):
            for b in a:
                if isinstance(b, torch.Tensor):
                    yield b


_ASYNC_POS: dict = {}


def _async_op(fn, args, kwargs):
    """``(args, kwargs, async_op)`` with ``async_op`` taken out of the call, wherever it was given."""
    import inspect
    pos = _ASYNC_POS.get(fn)
    if pos is None:
        names = list(inspect.signature(fn).parameters)
        pos = _ASYNC_POS[fn] = names.index("async_op") if "async_op" in names else -1
    if 0 <= pos < len(args):
        return args[:pos] + args[pos + 1:], kwargs, bool(args[pos])
    return args, kwargs, bool(kwargs.pop("async_op", False))


def _first_tensor(args, kwargs):
    return next(_tensors(args, kwargs), None)


def _nbytes(args, kwargs) -> int:
    """The bytes of the largest tensor argument (the gathered output, the scattered input, the reduced tensor)."""
    return max((t.numel() * t.element_size() for t in _tensors(args, kwargs)), default=0)


def _work_class():
    import torch.distributed as dist

    class TimedWork(dist.Work):
        """A collective's ``Work`` whose ``wait()`` is timed as exposed communication."""

        def __init__(self, work, op, tensor):
            super().__init__()
            self._work, self._op, self._tensor = work, op, tensor

        def wait(self, timeout=None):
            w0 = _Clock.now(self._tensor)
            ok = self._work.wait() if timeout is None else self._work.wait(timeout)
            w1 = _Clock.now(self._tensor)
            op = self._op
            if op.wait0 is None:
                op.wait0, op.wait1 = w0, w1
            if op.t1 is None:  # no future, or its callback has not run yet: the wait saw it complete
                op.t1 = w1
            return ok

        def is_completed(self):
            return self._work.is_completed()

        def is_success(self):
            return self._work.is_success()

        def exception(self):
            return self._work.exception()

        def get_future(self):
            return self._work.get_future()

        def source_rank(self):
            return self._work.source_rank()

        def result(self):
            return self._work.result()

        def synchronize(self):
            return self._work.synchronize()

        def block_current_stream(self):
            return self._work.block_current_stream()

    return TimedWork


_WORK = None
_installed: dict = {}
_watches: list = []
_install_lock = threading.Lock()


def _TimedWork(work, op, tensor):  # noqa: N802 - a class made on first use (torch.distributed imported late)
    global _WORK
    if _WORK is None:
        _WORK = _work_class()
    return _WORK(work, op, tensor)


def _install(watch: CommWatch) -> None:
    import functools

    import torch.distributed as dist
    with _install_lock:
        _watches.append(watch)
        if _installed:
            return
        for name in WRAPPED:
            fn = getattr(dist, name, None)
            if fn is None:
                continue

            def wrapper(*args, __fn=fn, **kwargs):
                watches = [w for w in _watches if w._active]
                if not watches:
                    return __fn(*args, **kwargs)
                return watches[-1]._around(__fn, args, kwargs)

            _installed[name] = fn
            setattr(dist, name, functools.wraps(fn)(wrapper))


def _uninstall(watch: CommWatch) -> None:
    import torch.distributed as dist
    with _install_lock:
        if watch in _watches:
            _watches.remove(watch)
        if _watches:
            return
        for name, fn in _installed.items():
            setattr(dist, name, fn)
        _installed.clear()


def comm_fields(watch: Optional[CommWatch]) -> Tuple[Optional[float], Optional[float], Optional[int], Optional[int]]:
    """``(comm_time_s, comm_exposed_s, comm_count, comm_bytes)`` of the window, Nones without a watch."""
    if watch is None:
        return None, None, None, None
    t = watch.take()
    return t["comm_time_s"], t["comm_exposed_s"], t["comm_count"], t["comm_bytes"]
