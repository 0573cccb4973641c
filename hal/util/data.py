"""hal's own data files (``hal/data/``): facts kept as data, read from the installed package."""
from __future__ import annotations

import json
from importlib import resources


def data_json(name: str):
    """The parsed JSON file ``hal/data/<name>`` (``name`` may hold a sub-folder: ``"torch/x.json"``)."""
    return json.loads(resources.files("hal").joinpath("data", *name.split("/")).read_text(encoding="utf-8"))
