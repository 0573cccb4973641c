"""Op-level support of a device: which aten ops its PyTorch stack runs, and what to do about the rest.

``torch_profile`` (profiles: bundled in the built-in backends' folders, shipped by plugins through
``hal_torch_op_profile``, or observed; the judging rules) · ``torch_plan`` (a replacement for
each missing op: torch's decompositions, hal.ops, the host) · ``decompose`` (a decomposition as a
device kernel) · ``observe`` / ``observe_inputs`` (run each op on the device against the CPU:
``hal probe``).  :mod:`hal.fallback` installs the plans at run time; ``op_coverage`` reports them.
"""
