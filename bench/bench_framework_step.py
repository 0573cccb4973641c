"""What `hal run` costs a framework's training step: a Hugging Face Trainer step, a
Lightning step and a DeepSpeed ZeRO-3 step, as a user runs the recipe.

Each recipe is a script written for an NVIDIA GPU with the frameworks' own device choice
(the Trainer picks CUDA when `torch.cuda.is_available()`; Lightning gets
`accelerator="gpu" if torch.cuda.is_available() else "cpu"`), so that the same file also
runs plainly on a CPU.  Three commands run it in fresh processes, interleaved in every
repeat (the order rotates) so that load from elsewhere hits them alike:

* ``python recipe.py``                    -- the recipe plain on the CPU (baseline of hal cpu);
* ``HAL_BACKEND=cpu hal run recipe.py``   -- through hal, on the CPU (baseline of emu);
* ``HAL_BACKEND=emu HAL_EMU_DEVICES=1 hal run recipe.py`` -- through hal, on one emulated device.

One emulated device, as on the CPU: with the emulator's default of 8 devices (one node) the
Trainer does what it does on an 8-GPU machine, ``nn.DataParallel`` over all of them with 8 times
the batch, which is not the same step.

The DeepSpeed recipe (``deepspeed_small``: a decode-sized step, 2 layers of width 64 on 4 x 16
tokens; ``deepspeed_large``: a training-sized one, 4 layers of width 512 on 8 x 128 tokens) is
ZeRO-3 with DeepSpeed's default AdamW (FusedAdam) at 2 ranks, written in DeepSpeed's
accelerator-neutral idiom (``get_accelerator()``), so its plain run is DeepSpeed's own CPU run:
``DS_ACCELERATOR=cpu torchrun --nproc-per-node 2 recipe.py`` against ``hal run --nproc-per-node 2
recipe.py`` (two emulated devices).  Its step time is rank 0's.

The recipe times its own steps with a framework callback (CPU time of the process,
one torch thread, the first steps left out as warm-up) and prints the median; the bench also
takes each command's whole CPU time (user + sys of the process and its children).  Ratios are
paired: the variant over its baseline measured in the same repeat; each line gives the median
and the spread (min-max) over repeats.  Goals (issue 20): hal cpu / plain <= 1.05x and
emu / hal cpu <= 1.5x per step (issue 32 sets the same goals for the DeepSpeed step).

    python bench/bench_framework_step.py                     # every recipe, 5 repeats
    python bench/bench_framework_step.py --recipes trainer --repeats 3 --steps 30
    python bench/bench_framework_step.py --recipes deepspeed_small,deepspeed_large --repeats 7
    python bench/bench_framework_step.py --json > framework_step.json
"""
import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap

_TIMER = textwrap.dedent("""
    import statistics, time
    class StepTimer:
        def __init__(self, warmup):
            self.warmup, self.times, self.t0 = warmup, [], None
        def begin(self):
            self.t0 = time.process_time()
        def end(self):
            self.times.append(time.process_time() - self.t0)
        def report(self, device):
            kept = self.times[self.warmup:]
            print(f"BENCH device={device} steps={len(kept)} step_ms={statistics.median(kept) * 1e3:.3f}")
""")

TRAINER = _TIMER + textwrap.dedent("""
    import sys, tempfile, torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments, TrainerCallback
    torch.manual_seed(0)
    steps, warmup = int(sys.argv[1]), int(sys.argv[2])
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=128, n_head=4, n_positions=64, vocab_size=1000))
    class Tokens(torch.utils.data.Dataset):
        def __len__(self): return 100000
        def __getitem__(self, i):
            ids = torch.randint(0, 1000, (64,), generator=torch.Generator().manual_seed(i))
            return {"input_ids": ids, "labels": ids}
    timer = StepTimer(warmup)
    class Timing(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw): timer.begin()
        def on_step_end(self, args, state, control, **kw): timer.end()
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, max_steps=steps, per_device_train_batch_size=8,
                                 learning_rate=1e-3, save_strategy="no", report_to=[], disable_tqdm=True,
                                 logging_strategy="no", dataloader_num_workers=0)
        trainer = Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[Timing()])
        trainer.train()
    timer.report(next(model.parameters()).device.type)
""")

LIGHTNING = _TIMER + textwrap.dedent("""
    import sys, torch, lightning as L
    torch.manual_seed(0)
    steps, warmup = int(sys.argv[1]), int(sys.argv[2])
    class Net(L.LightningModule):
        def __init__(self):
            super().__init__()
            layer = torch.nn.TransformerEncoderLayer(128, 4, 256, dropout=0.0, batch_first=True)
            self.body = torch.nn.TransformerEncoder(layer, 2)
            self.head = torch.nn.Linear(128, 10)
        def training_step(self, batch, i):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.head(self.body(x).mean(1)), y)
        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    data = torch.utils.data.TensorDataset(torch.randn(8 * steps, 32, 128, generator=g),
                                          torch.randint(0, 10, (8 * steps,), generator=g))
    timer = StepTimer(warmup)
    class Timing(L.Callback):
        def on_train_batch_start(self, *a): timer.begin()
        def on_train_batch_end(self, trainer, module, *a):
            timer.end()
            timer.device = next(module.parameters()).device.type  # Lightning moves it back to the CPU after fit
    model = Net()
    trainer = L.Trainer(accelerator="gpu" if torch.cuda.is_available() else "cpu", devices=1, max_steps=steps,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[Timing()])
    trainer.fit(model, torch.utils.data.DataLoader(data, batch_size=8))
    timer.report(timer.device)
""")

DEEPSPEED = _TIMER + textwrap.dedent("""
    import os, sys, torch, deepspeed
    import torch.nn.functional as F
    from deepspeed.accelerator import get_accelerator
    steps, warmup, dim, layers, batch, seq = map(int, sys.argv[1:7])
    local_rank = int(os.environ["LOCAL_RANK"])
    get_accelerator().set_device(local_rank)
    device = torch.device(get_accelerator().device_name(local_rank))
    deepspeed.init_distributed()
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    config = {"train_batch_size": batch * world, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
              "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}, "steps_per_print": 10**9}
    class Block(torch.nn.Module):  # pre-norm attention + MLP (nn.MultiheadAttention reads its weights
        def __init__(self):         # outside forward, which ZeRO-3 does not gather)
            super().__init__()
            self.ln1, self.ln2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
            self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
            self.up, self.down = torch.nn.Linear(dim, 4 * dim), torch.nn.Linear(4 * dim, dim)
        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, 4, dim // 4).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, dim)
            x = x + self.proj(a)
            return x + self.down(F.gelu(self.up(self.ln2(x))))
    torch.manual_seed(0)
    with deepspeed.zero.Init(config_dict_or_path=config):
        model = torch.nn.Sequential(torch.nn.Embedding(1000, dim), *[Block() for _ in range(layers)],
                                    torch.nn.LayerNorm(dim), torch.nn.Linear(dim, 1000))
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    g = torch.Generator().manual_seed(1 + rank)
    timer = StepTimer(warmup)
    for step in range(steps):
        ids = torch.randint(0, 1000, (batch, seq + 1), generator=g).to(device)
        timer.begin()
        loss = F.cross_entropy(engine(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())
        engine.backward(loss)
        engine.step()
        timer.end()
    if rank == 0:
        timer.report(next(engine.module.parameters()).device.type)
    torch.distributed.destroy_process_group()
""")

#: name -> (code, processes (0: plain python), extra script arguments, environment of the plain run)
RECIPES = {"trainer": (TRAINER, 0, (), {}), "lightning": (LIGHTNING, 0, (), {}),
           "deepspeed_small": (DEEPSPEED, 2, (64, 2, 4, 16), {"DS_ACCELERATOR": "cpu"}),
           "deepspeed_large": (DEEPSPEED, 2, (512, 4, 8, 128), {"DS_ACCELERATOR": "cpu"})}
VARIANTS = ("plain", "hal_cpu", "emu")
BASELINE = {"hal_cpu": "plain", "emu": "hal_cpu"}
GOAL = {"hal_cpu": 1.05, "emu": 1.5}
_LINE = re.compile(r"^BENCH device=(\S+) steps=(\d+) step_ms=([\d.]+)$", re.M)


def _env(variant, nproc=0, plain_env=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HAL_", "DS_ACCELERATOR"))}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1",
               TRANSFORMERS_VERBOSITY="error", PYTHONWARNINGS="ignore")
    if variant == "plain":
        env.update(plain_env or {})
    else:
        env.update(HAL_BACKEND="cpu" if variant == "hal_cpu" else "emu", HAL_RUN_QUIET="1")
    if variant == "emu":
        # one device per process, as on the CPU (8 would make the Trainer use DataParallel)
        env["HAL_EMU_DEVICES"] = str(max(1, nproc))
    return env


def run_once(path, variant, steps, warmup, nproc=0, extra=(), plain_env=None):
    """One fresh command: (step ms, device the recipe trained on, CPU s of the whole command)."""
    launch = [f"--nproc-per-node={nproc}"] if nproc else []
    if variant == "plain":
        head = [sys.executable, "-m", "torch.distributed.run", "--standalone", *launch] if nproc else [sys.executable]
    else:
        head = [sys.executable, "-m", "hal", "run", *launch]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(head + [path, str(steps), str(warmup), *map(str, extra)],
                          env=_env(variant, nproc, plain_env), capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    found = _LINE.search(proc.stdout)
    if proc.returncode != 0 or not found:
        raise SystemExit(f"bench_framework_step: {variant} run of {os.path.basename(path)} failed "
                         f"(exit {proc.returncode}):\n{proc.stdout[-1500:]}\n{proc.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return float(found.group(3)), found.group(1), cpu


def measure(recipe, repeats, steps, warmup):
    code, nproc, extra, plain_env = RECIPES[recipe]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"{recipe}_recipe.py")
        with open(path, "w") as f:
            f.write(code)
        # warms the file cache and compiled-module caches (DeepSpeed's CPU FusedAdam is built on first use)
        run_once(path, "plain", warmup + 2, warmup, nproc, extra, plain_env)
        res = {v: {"step_ms": [], "command_cpu_s": [], "device": None} for v in VARIANTS}
        for r in range(repeats):
            order = VARIANTS[r % 3:] + VARIANTS[:r % 3]  # rotate: each variant goes first as often
            for v in order:
                ms, device, cpu = run_once(path, v, steps, warmup, nproc, extra, plain_env)
                res[v]["step_ms"].append(ms)
                res[v]["command_cpu_s"].append(cpu)
                res[v]["device"] = device
    for v, base in BASELINE.items():
        for key in ("step_ms", "command_cpu_s"):
            ratios = [a / b for a, b in zip(res[v][key], res[base][key])]
            res[v].setdefault("ratio", {})[key] = {"median": statistics.median(ratios), "min": min(ratios),
                                                   "max": max(ratios), "baseline": base}
    return res


def _fmt(values, unit):
    return f"{statistics.median(values):8.2f} {unit} ({min(values):.2f}-{max(values):.2f})"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipes", default=",".join(RECIPES), help=f"comma-separated: {', '.join(RECIPES)}")
    p.add_argument("--repeats", type=int, default=5, help="fresh processes per variant")
    p.add_argument("--steps", type=int, default=40, help="training steps per run")
    p.add_argument("--warmup", type=int, default=10, help="first steps left out of the step time")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if args.steps <= args.warmup:
        p.error(f"--steps {args.steps} must exceed --warmup {args.warmup}: no step would be timed")
    names = [r.strip() for r in args.recipes.split(",") if r.strip()]
    unknown = sorted(set(names) - set(RECIPES))
    if unknown:
        p.error(f"--recipes: unknown {', '.join(unknown)}; choose from {', '.join(RECIPES)}")
    results = {name: measure(name, args.repeats, args.steps, args.warmup) for name in names}
    if args.json:
        print(json.dumps({"repeats": args.repeats, "steps": args.steps, "warmup": args.warmup,
                          "threads": 1, "goal": GOAL, "recipes": results}, indent=2))
        return
    print(f"{args.repeats} repeats, fresh processes, rotated order; {args.steps} steps, first {args.warmup} "
          f"left out; one torch thread; step time = CPU time of the process (median); "
          f"ratio = median of paired ratios (spread)")
    for name, res in results.items():
        print(f"\n{name}")
        for v in VARIANTS:
            line = f"  {v:8s} on {res[v]['device']:4s} step {_fmt(res[v]['step_ms'], 'ms')}   " \
                   f"command {_fmt(res[v]['command_cpu_s'], 's')}"
            if v in BASELINE:
                s, c = res[v]["ratio"]["step_ms"], res[v]["ratio"]["command_cpu_s"]
                line += (f"\n           vs {BASELINE[v]}: step {s['median']:.3f}x ({s['min']:.3f}-{s['max']:.3f}; "
                         f"goal <= {GOAL[v]}x), command {c['median']:.3f}x ({c['min']:.3f}-{c['max']:.3f})")
            print(line)


if __name__ == "__main__":
    main()
