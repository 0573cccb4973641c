"""The resharding job (tests/dist/_reshard_worker.py) under `torchrun --nnodes 1:2`, one rank a node:
argv: ROOT OUT STEPS SAVE_AT HOLD_AT.  In the first attempt both ranks save at SAVE_AT (synchronously,
so the step is committed), and at step HOLD_AT rank 0 writes OUT.holding and waits in a barrier that
rank 1 never joins, until the test kills rank 1's node; the barrier then fails, and the agent left
re-forms the job with the nodes it has.  The next attempt resumes from the last checkpoint at that
size and trains to STEPS; rank r writes what it saw to OUT.r as JSON."""
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hal.dist  # noqa: E402

hal.dist.init(timeout=20)  # how long rank 0 waits for the lost node
import torch.distributed as dist  # noqa: E402

from _reshard_worker import train  # noqa: E402

root, out, steps, save_at, hold_at = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def hold(step, saver):
    saver.step(step)  # the step reached, for the failure record (no `every`: saves only at SAVE_AT)
    if attempt == 0 and step == hold_at:
        if dist.get_rank() == 0:
            Path(f"{out}.holding").write_text(str(step))
            dist.barrier()  # fails once the other node is gone
        while True:
            time.sleep(1)


seen = train(root, steps, save_at=[save_at], async_save=False, after_step=hold)
seen["attempt"], seen["world"] = attempt, dist.get_world_size()
Path(f"{out}.{dist.get_rank()}").write_text(json.dumps(seen))
dist.destroy_process_group()
