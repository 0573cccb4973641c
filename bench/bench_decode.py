"""Decode throughput: greedy generation with a KV cache on a small LLaMA, as a user runs it.

The workload: ``LlamaForCausalLM`` from a ``LlamaConfig`` written here (hidden 256, 4 layers,
8 query heads sharing 2 key/value heads (GQA), vocab 8192, random weights from a fixed seed),
``model.generate(do_sample=False, use_cache=True)`` with ``min_new_tokens = max_new_tokens``
from a prompt of 32 tokens, at batch 1 and batch 16.  Throughput is generated tokens per
second (batch x new tokens / time of ``generate``).

Each variant is a fresh process of this same file (``--worker``); baseline (a) is plain torch:

  (a) plain         ``python bench_decode.py --worker --device cpu``
  (b) hal run cpu   ``HAL_BACKEND=cpu hal run bench_decode.py --worker --device cuda``: the
                    script written for CUDA (``.to("cuda")``, ``device="cuda"``), redirected
  (c) hal.ops       ``python bench_decode.py --worker --device cpu --hal-ops``: plain, with
                    hal.ops in the model (below)
  (d) hal run emu   ``HAL_BACKEND=emu hal run ... --device cuda`` (``--emu``; reported apart:
                    it is the emulated accelerator, not a CPU path)

hal has no user-facing call that puts hal.ops into a transformers model (hal/stacks/
hub_kernels.py only switches Hugging Face's hub kernels off where they have none, and the
``kernels`` library is not installed here), so (c) patches the model as a user would:
``LlamaRMSNorm.forward`` -> ``hal.ops.rms_norm``; each ``LlamaMLP`` gets one [gate | up]
projection (the two weights concatenated: the one fused projection ``hal.ops.swiglu``'s
docstring asks for) and ``down(hal.ops.swiglu(gate_up(x)))``; transformers' module-level
``apply_rotary_pos_emb`` -> ``hal.ops.rotary_embedding`` (``seq_dim=-2``, half-width tables).
The worker prints ``hal.ops.stats()`` so the calls are seen to go through hal.ops.

Variants run in ABBA order within each repeat (a b c, c b a, ...), so that load from other
processes on a shared machine hits them alike.  Printed per variant, thread setting and
batch: tokens/s inside the process (around ``generate`` only, the median of ``--calls``
calls: import, model build and a short warm-up ``generate`` excluded; then the median over
repeats) and its ratio against plain (variant tokens/s / plain tokens/s of the same repeat:
> 1 is faster), median and spread (min-max); then the whole command's wall time (start-up
included) and its ratio (variant time / plain time: < 1 is faster).  Greedy token ids of every variant are compared with
plain's: ``agree`` is the fraction of generated tokens equal to plain's.

Thread settings: the default (torch's, OMP_NUM_THREADS unset) and OMP_NUM_THREADS=1.

    python bench/bench_decode.py                        # 3 repeats, batch 1 and 16, 64 new tokens
    python bench/bench_decode.py --repeats 5 --emu      # also the emulated accelerator
    python bench/bench_decode.py --quick                # one short repeat: does it run
    python bench/bench_decode.py --json > decode.json
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.abspath(__file__)
MARK = "bench_decode: "
PROMPT_TOKENS = 32

#: variant -> (runs under hal run with this HAL_BACKEND, or None; --device; --hal-ops)
VARIANTS = {
    "plain": (None, "cpu", False),
    "hal_run_cpu": ("cpu", "cuda", False),
    "hal_ops": (None, "cpu", True),
    "hal_run_emu": ("emu", "cuda", False),
}
BASELINE = "plain"


# -- the user's script (one process) ----------------------------------------------------------
def llama_config():
    from transformers import LlamaConfig
    return LlamaConfig(vocab_size=8192, hidden_size=256, intermediate_size=704, num_hidden_layers=4,
                       num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=512,
                       rms_norm_eps=1e-5, hidden_act="silu", tie_word_embeddings=False,
                       bos_token_id=1, eos_token_id=2, pad_token_id=0)


def use_hal_ops(model):
    """Put hal.ops into a transformers LLaMA: RMSNorm, SwiGLU (one [gate | up] projection), rotary.
    Every target is checked to exist first: a transformers release that moved one fails here,
    naming it, rather than running the plain model under the hal.ops label."""
    import torch
    import transformers.models.llama.modeling_llama as llama

    import hal.ops

    for owner, name in ((llama.LlamaRMSNorm, "forward"), (llama.LlamaMLP, "forward"),
                        (llama, "apply_rotary_pos_emb")):
        if not hasattr(owner, name):
            raise SystemExit(f"bench_decode --hal-ops: transformers {__import__('transformers').__version__} "
                             f"has no {getattr(owner, '__name__', owner)}.{name}; update use_hal_ops()")

    def rms_norm_forward(self, x):
        return hal.ops.rms_norm(x, self.weight, self.variance_epsilon)

    def mlp_forward(self, x):
        return self.down_proj(hal.ops.swiglu(self.gate_up_proj(x)))

    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
        # (batch, heads, seq, head_dim); every row of the batch has the same positions here
        # (equal-length prompts, no padding), so the first row's table serves all
        half = q.shape[-1] // 2
        c, s = cos[0, :, :half], sin[0, :, :half]
        return (hal.ops.rotary_embedding(q, c, s, seq_dim=-2), hal.ops.rotary_embedding(k, c, s, seq_dim=-2))

    for m in model.modules():
        if isinstance(m, llama.LlamaRMSNorm):
            m.forward = rms_norm_forward.__get__(m)
        elif isinstance(m, llama.LlamaMLP):
            g, u = m.gate_proj, m.up_proj
            m.gate_up_proj = torch.nn.Linear(g.in_features, 2 * g.out_features, bias=False,
                                             device=g.weight.device, dtype=g.weight.dtype)
            with torch.no_grad():
                m.gate_up_proj.weight.copy_(torch.cat((g.weight, u.weight), 0))
            del m.gate_proj, m.up_proj
            m.forward = mlp_forward.__get__(m)
    llama.apply_rotary_pos_emb = apply_rotary_pos_emb


def worker(args):
    t_start = time.perf_counter()
    import torch
    from transformers import LlamaForCausalLM

    device = args.device  # "cuda" in the CUDA-written script that hal run redirects
    torch.manual_seed(0)
    model = LlamaForCausalLM(llama_config()).eval()
    if args.hal_ops:
        use_hal_ops(model)
    model.to(device)
    gen = dict(do_sample=False, use_cache=True, pad_token_id=0, eos_token_id=None)
    out = {"threads": torch.get_num_threads(), "batches": {}}
    g = torch.Generator().manual_seed(1)
    with torch.inference_mode():
        for batch in args.batch:
            prompt = torch.randint(3, 8192, (batch, PROMPT_TOKENS), generator=g).to(device)
            mask = torch.ones_like(prompt)
            model.generate(prompt, attention_mask=mask, min_new_tokens=4, max_new_tokens=4, **gen)  # warm-up
            if device == "cuda":
                torch.cuda.synchronize()
            times = []
            for _ in range(args.calls):
                t0 = time.perf_counter()
                ids = model.generate(prompt, attention_mask=mask, min_new_tokens=args.new_tokens,
                                     max_new_tokens=args.new_tokens, **gen)
                if device == "cuda":
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
            secs = statistics.median(times)
            new = ids[:, PROMPT_TOKENS:].cpu()
            assert new.shape == (batch, args.new_tokens), new.shape
            out["batches"][str(batch)] = {"gen_s": secs, "tokens_per_s": batch * args.new_tokens / secs,
                                          "ids": new.tolist()}
    out["in_process_s"] = time.perf_counter() - t_start
    if args.hal_ops:
        import hal.ops
        out["hal_ops_stats"] = hal.ops.stats()
    print(MARK + json.dumps(out), flush=True)


# -- the driver: fresh processes, interleaved --------------------------------------------------
def command(variant, args):
    backend, device, hal_ops = VARIANTS[variant]
    script = [HERE, "--worker", "--device", device, "--new-tokens", str(args.new_tokens), "--calls", str(args.calls),
              "--batch", ",".join(map(str, args.batch))] + (["--hal-ops"] if hal_ops else [])
    if backend is None:
        return [sys.executable] + script, None
    return [sys.executable, "-m", "hal", "run"] + script, backend


def run_once(variant, threads, args):
    cmd, backend = command(variant, args)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAL_") and k != "OMP_NUM_THREADS"}
    env.update(HAL_RUN_QUIET="1", PYTHONWARNINGS="ignore", TRANSFORMERS_VERBOSITY="error")
    if backend:
        env["HAL_BACKEND"] = backend
    if threads != "default":
        env["OMP_NUM_THREADS"] = threads
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    wall = time.perf_counter() - t0
    lines = [l for l in proc.stdout.splitlines() if l.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
        raise SystemExit(f"{' '.join(cmd)} (exit {proc.returncode}) printed no result:\n" + "\n".join(tail))
    res = json.loads(lines[-1][len(MARK):])
    res["wall_s"] = wall
    return res


def spread(values, digits=3):
    return {"median": round(statistics.median(values), digits), "min": round(min(values), digits),
            "max": round(max(values), digits)}


def agreement(ids, ref):
    """Fraction of generated tokens equal to the baseline's, position by position."""
    flat = [(a == b) for row, rrow in zip(ids, ref) for a, b in zip(row, rrow)]
    return sum(flat) / len(flat)


def measure(threads, variants, args):
    runs = {v: [] for v in variants}
    for r in range(args.repeats + args.warmup_rounds):
        order = variants if r % 2 == 0 else tuple(reversed(variants))
        for v in order:
            res = run_once(v, threads, args)
            if r >= args.warmup_rounds:  # a first round warms the file cache
                runs[v].append(res)
    out = {"threads": runs[BASELINE][0]["threads"], "variants": {}}
    base = runs[BASELINE]
    for v in variants:
        row = {"wall_s": spread([x["wall_s"] for x in runs[v]]),
               "wall_vs_plain": spread([x["wall_s"] / b["wall_s"] for x, b in zip(runs[v], base)]),
               "batches": {}}
        for batch in map(str, args.batch):
            tps = [x["batches"][batch]["tokens_per_s"] for x in runs[v]]
            ratio = [x["batches"][batch]["tokens_per_s"] / b["batches"][batch]["tokens_per_s"]
                     for x, b in zip(runs[v], base)]
            agree = [agreement(x["batches"][batch]["ids"], b["batches"][batch]["ids"])
                     for x, b in zip(runs[v], base)]
            row["batches"][batch] = {"tokens_per_s": spread(tps, 1), "tokens_per_s_vs_plain": spread(ratio),
                                     "agree_with_plain": min(agree)}
        if "hal_ops_stats" in runs[v][0]:
            row["hal_ops_calls"] = {op: {k: n for k, n in s.items() if k != "last_fallback" and n}
                                    for op, s in runs[v][0]["hal_ops_stats"].items()}
        out["variants"][v] = row
    return out


def _fmt(s, unit=""):
    return f"{s['median']:.3f}{unit} ({s['min']:.3f}-{s['max']:.3f})"


def print_table(setting, res, args):
    print(f"\n== threads: {setting} (torch uses {res['threads']}); median (min-max) of {args.repeats} repeats; "
          f"baseline: plain python on the CPU")
    print(f"{'variant':12s} {'batch':>5s} {'tokens/s':>10s}  {'tok/s x plain (>1 faster)':28s} {'agree':>6s}")
    for v, row in res["variants"].items():
        for batch, b in row["batches"].items():
            t = b["tokens_per_s"]
            print(f"{v:12s} {batch:>5s} {t['median']:10.1f}  {_fmt(b['tokens_per_s_vs_plain'], 'x'):28s} "
                  f"{b['agree_with_plain']:6.3f}")
    print(f"{'variant':12s} {'whole command wall s':24s} {'wall x plain (<1 faster)'}")
    for v, row in res["variants"].items():
        w = row["wall_s"]
        print(f"{v:12s} {w['median']:.2f} ({w['min']:.2f}-{w['max']:.2f}){'':8s} {_fmt(row['wall_vs_plain'], 'x')}")
    for v, row in res["variants"].items():
        if "hal_ops_calls" in row:
            print(f"{v}: hal.ops calls in one process: {row['hal_ops_calls']}")


def _ints(text):
    return [int(x) for x in text.split(",") if x]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3, help="rounds of fresh processes per thread setting")
    p.add_argument("--new-tokens", type=int, default=64, help="tokens generated per sequence")
    p.add_argument("--batch", type=_ints, default=[1, 16], help="batch sizes, comma-separated (default 1,16)")
    p.add_argument("--threads", default="default,1",
                   help="thread settings, comma-separated: default (OMP_NUM_THREADS unset) or a number")
    p.add_argument("--calls", type=int, default=3,
                   help="timed generate calls per batch in each process; the process reports their median")
    p.add_argument("--emu", action="store_true", help="also (d): HAL_BACKEND=emu hal run")
    p.add_argument("--warmup-rounds", type=int, default=1, help="rounds run first and not counted")
    p.add_argument("--quick", action="store_true",
                   help="one round, 8 new tokens, one call, default threads, no warm-up round: checks that it runs")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--timeout", type=float, default=600, help="seconds per process")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--device", default="cpu", help=argparse.SUPPRESS)
    p.add_argument("--hal-ops", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker(args)
    if args.quick:
        args.repeats, args.new_tokens, args.threads, args.warmup_rounds, args.calls = 1, 8, "default", 0, 1
    variants = tuple(v for v in VARIANTS if v != "hal_run_emu" or args.emu)
    import torch
    import transformers
    results = {"baseline": "plain python on the CPU (variant plain), same script, fresh process",
               "torch": torch.__version__, "transformers": transformers.__version__, "cpus": os.cpu_count(),
               "prompt_tokens": PROMPT_TOKENS, "new_tokens": args.new_tokens, "batch": args.batch,
               "repeats": args.repeats, "settings": {}}
    for setting in args.threads.split(","):
        res = measure(setting, variants, args)
        results["settings"][setting] = res
        if not args.json:
            print_table(setting, res, args)
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
