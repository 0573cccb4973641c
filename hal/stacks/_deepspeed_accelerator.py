"""``HalAccelerator``: DeepSpeed's accelerator interface over a hal backend.

Imported only once DeepSpeed's own ``deepspeed.accelerator.abstract_accelerator`` is (the class
derives from it); :mod:`hal.stacks.deepspeed` decides when.  Checked against DeepSpeed 0.19.8.
"""
from __future__ import annotations

import contextlib

import torch
from deepspeed.accelerator.abstract_accelerator import DeepSpeedAccelerator

from hal._errors import NotSupported
from hal.dist.process_group import backend_string
from hal.stacks import cuda_graph_switches

#: DeepSpeed's switches for the CUDA-graph paths (hal/data/cuda_graph_switches.json), named when a backend has none
GRAPH_SWITCH = "leave DeepSpeed's CUDA graphs off: " + next(
    row["switch"] for row in cuda_graph_switches() if row["library"] == "DeepSpeed")


def _index(device) -> int:
    """A device index from what DeepSpeed passes: ``1``, ``"1"`` (``LOCAL_RANK``), ``torch.device("emu", 1)``."""
    if isinstance(device, (str, torch.device)) and not str(device).isdigit():
        device = torch.device(device).index or 0
    return int(device)


class _TensorType:
    """What ``torch.cuda.FloatTensor`` is to DeepSpeed: ``FloatTensor([1.0])`` makes a tensor of that
    data, ``FloatTensor(3)`` an uninitialised one of that size, on the current device."""

    def __init__(self, accelerator: "HalAccelerator", dtype: torch.dtype):
        self._accelerator, self.dtype = accelerator, dtype

    def __call__(self, *args):
        device = self._accelerator.current_device_name()
        if len(args) == 1 and not isinstance(args[0], int):
            return torch.tensor(args[0], dtype=self.dtype, device=device)
        return torch.empty(*args, dtype=self.dtype, device=device)

    def __repr__(self) -> str:
        return f"<{self._accelerator._name} tensor type {self.dtype}>"


class HalAccelerator(DeepSpeedAccelerator):
    """DeepSpeed's accelerator for a hal backend with a device (the cpu backend keeps DeepSpeed's own CPU
    accelerator): its device type and names, its CCL, its streams,
    events, memory statistics and generators, and op builders that need no CUDA (see
    :mod:`hal.stacks._deepspeed_ops`).  A feature the backend lacks raises :class:`hal.NotSupported`
    naming DeepSpeed's switch, never a silent None."""

    def __init__(self, backend):
        super().__init__()
        self.backend = backend
        self._name = backend.device_type
        self._communication_backend_name = backend_string(backend)
        self._compile_backend = "inductor"

    def __repr__(self) -> str:
        return f"<hal DeepSpeed accelerator {self._name} ({self.backend.name})>"

    # -- a device with streams: DeepSpeed orders its work with them ------------------------------
    def is_synchronized_device(self):
        return False

    def use_host_timers(self):
        return False

    def resolves_data_dependency(self):
        return False

    def handles_memory_backpressure(self):
        return False

    # -- devices ---------------------------------------------------------------------------------
    def device_name(self, device_index=None):
        if device_index is None:
            return self._name
        return f"{self._name}:{_index(device_index)}"

    def device(self, device_index=None):
        ctx = getattr(self.backend.module, "device", None)
        if device_index is not None:
            device_index = _index(device_index)
        return ctx(device_index) if ctx is not None else torch.device(self.device_name(device_index))

    def set_device(self, device_index):
        self.backend.set_device(_index(device_index))

    def current_device(self):
        return self.backend.current_device()

    def current_device_name(self):
        return f"{self._name}:{self.backend.current_device()}"

    def device_count(self):
        return self.backend.device_count()

    def synchronize(self, device_index=None):
        self.backend.synchronize(device_index)

    # -- random numbers --------------------------------------------------------------------------
    def random(self):
        return torch.random

    def set_rng_state(self, new_state, device_index=None):
        return self.backend.set_rng_state(new_state, device_index)

    def get_rng_state(self, device_index=None):
        return self.backend.get_rng_state(device_index)

    def manual_seed(self, seed):
        return self.backend.manual_seed(seed)

    def manual_seed_all(self, seed):
        return self.backend.manual_seed_all(seed)

    def initial_seed(self):
        return self.backend.initial_seed()

    def default_generator(self, device_index):
        generators = getattr(self.backend.module, "default_generators", None)
        if generators is None:
            raise NotSupported(self.backend.name, "DeepSpeed default_generator",
                               f"torch.{self._name} has no default_generators")
        return generators[int(device_index)]

    # -- streams and events ----------------------------------------------------------------------
    @property
    def Stream(self):  # noqa: N802 - DeepSpeed's name
        return self.backend.module.Stream

    def stream(self, stream):
        return contextlib.nullcontext() if stream is None else self.backend.stream(stream)

    def current_stream(self, device_index=None):
        return self.backend.current_stream(device_index)

    def default_stream(self, device_index=None):
        fn = getattr(self.backend.module, "default_stream", None)
        return fn(device_index) if fn is not None else self.current_stream(device_index)

    @property
    def Event(self):  # noqa: N802 - DeepSpeed's name
        return self.backend.module.Event

    # -- memory ----------------------------------------------------------------------------------
    def _memory(self, method: str, device_index=None, neutral=0):
        try:
            return getattr(self.backend, method)(device_index)
        except NotSupported:
            return neutral  # DeepSpeed only logs these; the backend keeps no allocator statistics

    def empty_cache(self):
        try:
            self.backend.empty_cache()
        except NotSupported:
            pass  # nothing cached to free

    def memory_allocated(self, device_index=None):
        return self._memory("memory_allocated", device_index)

    def max_memory_allocated(self, device_index=None):
        return self._memory("max_memory_allocated", device_index)

    def reset_max_memory_allocated(self, device_index=None):
        self._memory("reset_peak_memory_stats", device_index, None)

    def memory_cached(self, device_index=None):
        return self._memory("memory_reserved", device_index)

    def max_memory_cached(self, device_index=None):
        return self.max_memory_reserved(device_index)

    def reset_max_memory_cached(self, device_index=None):
        self._memory("reset_peak_memory_stats", device_index, None)

    def memory_stats(self, device_index=None):
        return self._memory("memory_stats", device_index, {})

    def reset_peak_memory_stats(self, device_index=None):
        self._memory("reset_peak_memory_stats", device_index, None)

    def memory_reserved(self, device_index=None):
        return self._memory("memory_reserved", device_index)

    def max_memory_reserved(self, device_index=None):
        stats = self.memory_stats(device_index)
        return int(stats.get("reserved_bytes.all.peak", self.max_memory_allocated(device_index)))

    def total_memory(self, device_index=None):
        return self.backend.device_properties(device_index).total_memory

    def available_memory(self, device_index=None):
        try:
            return int(self.backend.mem_get_info(device_index)[0])
        except NotSupported:
            return self.total_memory(device_index) - self.memory_allocated(device_index)

    # -- dtypes ----------------------------------------------------------------------------------
    def is_bf16_supported(self):
        return torch.bfloat16 in self.backend.supported_dtypes()

    def is_fp16_supported(self):
        return torch.float16 in self.backend.supported_dtypes()

    def supported_dtypes(self):
        return [dt for dt in (torch.float32, torch.float16, torch.bfloat16) if dt in self.backend.supported_dtypes()]

    # -- misc ------------------------------------------------------------------------------------
    def is_available(self):
        return True

    def range_push(self, msg, domain=None, category=None):
        return None  # no profiler ranges on this backend (CUDA's are NVTX)

    def range_pop(self, domain=None):
        return None

    def lazy_call(self, callback):
        return callback()

    def communication_backend_name(self):
        return self._communication_backend_name

    def is_triton_supported(self):
        return False

    # -- graphs: none on a hal backend that is not CUDA ------------------------------------------
    def create_graph(self):
        raise NotSupported(self.backend.name, "DeepSpeed create_graph (CUDA graphs)", GRAPH_SWITCH)

    def capture_to_graph(self, graph, pool=None, stream=None):
        raise NotSupported(self.backend.name, "DeepSpeed capture_to_graph (CUDA graphs)", GRAPH_SWITCH)

    def replay_graph(self, graph):
        raise NotSupported(self.backend.name, "DeepSpeed replay_graph (CUDA graphs)", GRAPH_SWITCH)

    # -- legacy tensor types ---------------------------------------------------------------------
    @property
    def BFloat16Tensor(self):  # noqa: N802
        return _TensorType(self, torch.bfloat16)

    @property
    def ByteTensor(self):  # noqa: N802
        return _TensorType(self, torch.uint8)

    @property
    def DoubleTensor(self):  # noqa: N802
        return _TensorType(self, torch.float64)

    @property
    def FloatTensor(self):  # noqa: N802
        return _TensorType(self, torch.float32)

    @property
    def HalfTensor(self):  # noqa: N802
        return _TensorType(self, torch.float16)

    @property
    def IntTensor(self):  # noqa: N802
        return _TensorType(self, torch.int32)

    @property
    def LongTensor(self):  # noqa: N802
        return _TensorType(self, torch.int64)

    # -- tensors, op builders, launch ------------------------------------------------------------
    def on_accelerator(self, tensor):
        return tensor.device.type == self._name

    def op_builder_dir(self):
        return "deepspeed.ops.op_builder.cpu"  # the builder names DeepSpeed lists; ours are made below

    def create_op_builder(self, class_name):
        builder = self.get_op_builder(class_name)
        return builder() if builder is not None else None

    def get_op_builder(self, class_name):
        from hal.stacks import _deepspeed_ops as ops  # imports deepspeed.ops: only once DeepSpeed asks
        if class_name == "FusedAdamBuilder":
            return ops.TorchFusedAdamBuilder
        if class_name in ops.HOST_BUILDERS:
            return ops.host_builder(class_name, self.backend.name)
        return ops.unavailable_builder(class_name, self.backend.name)

    def build_extension(self):
        from torch.utils.cpp_extension import BuildExtension
        return BuildExtension

    def export_envs(self):
        return list(self.visible_devices_envs()) + ["HAL_"]

    def visible_devices_envs(self):
        # DeepSpeed's launcher needs one; a backend without one (the emulator) is given CUDA's, as
        # DeepSpeed's own CPU accelerator does
        return list(self.backend.spec.visible_devices_env) or ["CUDA_VISIBLE_DEVICES"]

    def set_visible_devices_envs(self, current_env, local_accelerator_ids):
        for env in self.visible_devices_envs():
            current_env[env] = ",".join(map(str, local_accelerator_ids))

    def get_compile_backend(self):
        return self._compile_backend

    def set_compile_backend(self, backend):
        known = torch._dynamo.list_backends(exclude_tags=())
        if backend not in known:
            raise ValueError(f"{backend!r} is not a torch.compile backend on {self._name}; known: {known}")
        self._compile_backend = backend

