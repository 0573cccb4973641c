"""The resharding job (tests/dist/_reshard_worker.py) as a script for `hal run --nproc-per-node N`:
argv: ROOT OUT STEPS [SAVE_AT,...]; rank r writes what it saw to OUT.r as JSON."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hal.dist  # noqa: E402

hal.dist.init()
import torch.distributed as dist  # noqa: E402

from _reshard_worker import train  # noqa: E402

root, out, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
save_at = [int(s) for s in sys.argv[4].split(",")] if len(sys.argv) > 4 else None
seen = train(root, steps, save_at=save_at)
Path(f"{out}.{dist.get_rank()}").write_text(json.dumps(seen))
dist.destroy_process_group()
