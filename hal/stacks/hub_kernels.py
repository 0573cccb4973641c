"""Hugging Face's hub kernels (the ``kernels`` library) on a hal backend: off where they have none for the
device, which ``hal run`` does for the run (facts: hal/data/hub_kernels.json)."""
from __future__ import annotations

import importlib.util
import os

from hal.util.data import data_json


def switch_off(device_type: str, env=None, installed=None):
    """``(variable, value, why)`` that switches Hugging Face's hub kernels off for a run on ``device_type``,
    or None where they stay as they are: the ``kernels`` library (applied by ``from_pretrained`` in
    transformers >= 5.25 unless ``USE_HUB_KERNELS`` says no) is installed, has none for the device type and
    refuses the model then (``Unsupported device type 'emu'``), and the user has not set the variable.
    Facts: hal/data/hub_kernels.json."""
    fact = data_json("hub_kernels.json")
    var, off = fact["switch"]["env"], fact["switch"]["off"]
    env = os.environ if env is None else env
    installed = importlib.util.find_spec("kernels") is not None if installed is None else installed
    if not installed or var in env or device_type in fact["device_types"]:
        return None
    return var, off, (f"the kernels library has none for {device_type} ({fact['checked']}: "
                      f"{', '.join(fact['device_types'])}); set {var}=YES to try them")
