"""Run the cluster checks links and scale_ladder as the doctor does (torchrun worker).

Rank 0 writes ``{"links": ..., "scale_ladder": ...}`` as JSON to ``$HAL_LINKS_OUT``.
"""
import json
import os

import torch

from hal.dist import process_group as pg
from hal.doctor.cluster_context import from_launcher_env
from hal.doctor.cluster_links import links, scale_ladder


def main():
    timeout = float(os.environ.get("HAL_LINKS_TIMEOUT", "30"))
    me = pg.init(timeout=timeout)
    ctx = from_launcher_env(pg.STATE.store, backend=me.backend, timeout_s=timeout, device=torch.device(me.device))
    out = {"links": links(ctx), "scale_ladder": scale_ladder(ctx)}
    if ctx.rank == 0:
        with open(os.environ["HAL_LINKS_OUT"], "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
    pg.destroy()


if __name__ == "__main__":
    main()
