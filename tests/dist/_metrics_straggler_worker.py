"""A rank of a small training loop that logs step metrics; one rank can be made slow.

Each step sleeps ``base_s`` (plus ``extra_s`` on ``slow_rank``), then all ranks meet at a
barrier as synchronous data parallelism would; the rank's own work time is logged with
``step_time_s=``.  Run under hal.dist.launch.spawn.
"""
import logging
import time


def train(folder, steps=40, slow_rank=-1, base_s=0.02, extra_s=0.05, every=5):
    import torch.distributed as dist

    import hal.dist
    import hal.metrics

    rank = hal.dist.info().rank
    handler = logging.FileHandler(f"{folder}/rank{rank}.log")
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    logger = logging.getLogger("hal.metrics")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    with hal.metrics.MetricsLogger(folder, "exp", straggler_factor=1.5, straggler_steps=5,
                                   straggler_every=every) as log:
        for step in range(1, steps + 1):
            t0 = time.perf_counter()
            time.sleep(base_s + (extra_s if rank == slow_rank else 0.0))
            work = time.perf_counter() - t0
            dist.barrier()
            log.log_step(step, samples=8, step_time_s=work)
    handler.close()
    return {"rank": rank}
