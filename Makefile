PY ?= python3
.PHONY: torch-window setup demo test bench bench-decode bench-small gpu-check corpus-cuda-torch zoo chaos frameworks frameworks-timm reshard parallel long cluster cluster-demo llmstack frameworks-latest llmstack-torch214 accept accept-demo
setup:
	bash scripts/setup.sh
# the main job on the embedded defaults
demo: setup
	bash scripts/demo.sh
test: setup
	$(PY) -m pytest -q
bench: setup
	bash scripts/bench.sh
# fast at every size: decode throughput of a small LLaMA (plain, hal run cpu, hal.ops, hal run emu) and
# the emulator's per-op tax at small sizes, at the default thread count and at one thread (bench/RESULTS.md)
# fast at every size (docs/ops.md "Cost per call"): hal.ops per call across sizes, the op boundary
# alone, the hal run shim per redirected call, a decode workload and the emulator's small-op tax
bench-small: setup bench-decode
	$(PY) bench/bench_ops_sizes.py --json bench-ops-sizes.json
	$(PY) bench/bench_op_boundary.py
	OMP_NUM_THREADS=1 $(PY) bench/bench_op_boundary.py
	$(PY) bench/bench_redirect_overhead.py
bench-decode: setup
	$(PY) bench/bench_decode.py --emu
	$(PY) bench/bench_emulator.py --ops
	OMP_NUM_THREADS=1 $(PY) bench/bench_emulator.py --ops
# the CUDA path on a lent GPU: evidence goes to docs/validation/
gpu-check:
	bash scripts/gpu_check.sh
# hal on the torch versions vendors ship (2.4.1 ... 2.15.0): a venv each with PyPI's build, the project from a
# clean export, hal list / doctor / run (alone, DDP 2 ranks; cpu and emu) and the unit, backend and emulator-
# collective tests: docs/torch-window.md (hours, ~6 GB a version: not in CI; --versions X to run one)
torch-window:
	$(PY) scripts/torch_window.py
# the corpus of CUDA-written scripts under PyPI's CUDA build of torch, without a GPU (large
# download: not in CI)
corpus-cuda-torch:
	bash scripts/corpus_cuda_torch.sh
# op_coverage on real architectures: small models exported from torch and transformers configs
# (pip install -e '.[zoo]'), scanned against every target and rewritten; exports are cached in
# $$HAL_ZOO_CACHE (default ~/.cache/hal/op_coverage-zoo)
zoo:
	$(PY) -m pytest -q -s -m zoo tests/op_coverage/test_zoo.py
# framework recipes (transformers, PEFT, accelerate, Lightning) and the long redirect matrices
# (2 ranks, every backend) through hal run: not in make test
frameworks:
	$(PY) -m pytest -q -m frameworks
# the parallelism corpus (FSDP2, TP/SP, 2-D, HSDP, PP, DDP, compile; tests/parallel) through hal run on
# cpu and emu, each case against one process (about 12 minutes on 2 cores): docs/parallel.md
parallel:
	$(PY) tests/parallel/check_parallel.py
# the LLM-stack corpus (tests/llmstack): DeepSpeed ZeRO-1/2/3, offload, save/load and universal checkpoints, the
# HF Trainer and Accelerate with DeepSpeed, torchtitan FSDP2/TP/PP and resume, through hal run on cpu and emu
# against plain DeepSpeed on the CPU or a one-process run: docs/redirect.md, "LLM training stacks"
llmstack: setup
	$(PY) -m pytest -q -m llmstack tests/llmstack
# torchtitan 0.3 (torch >= 2.14) in .venv-torch214 (PyPI's torch 2.14.1, 6.1 GB: not in CI): the
# torchtitan recipes with 0.3's configs through hal run on cpu and emu, each run's losses or the limit it meets
llmstack-torch214:
	bash scripts/llmstack_torch214.sh
# the framework corpus and the HF recipes of tests/llmstack against the newest transformers / accelerate / peft /
# lightning, in .venv-latest with this environment's torch (drift shows here first): build/frameworks-latest.json
frameworks-latest:
	bash scripts/frameworks_latest.sh
# the timm recipe of tests/frameworks with timm itself, in .venv-timm (PyPI's CUDA torch + torchvision,
# about 5.5 GB: not in CI), through hal run on cpu and emu
frameworks-timm:
	bash scripts/frameworks_timm.sh
# sharded checkpoints (FSDP2 / TP on cpu/gloo) resumed at other world sizes and layouts: 4->2, 2->4,
# 4->8 (also on emu), TP2xDP2->DP4, DP4->TP2xDP2, a hal run relaunch at fewer ranks, and the async
# stall against a synchronous save (about 8 minutes on 2 cores)
reshard:
	$(PY) -m pytest -q -s -m reshard tests/dist/test_checkpoint_reshard_matrix.py
# the whole fault matrix of a 2-rank job under torchrun --max-restarts (CPU and emulator,
# several seeds; about 10 minutes): docs/fault-tolerance.md
chaos:
	$(PY) scripts/chaos.py --seeds 2 --json chaos.json
# tests kept out of make test for its 20-minute budget (a second OpInfo route, emu's OpInfo gradients, fault
# repeats, a trace timeout, the local doctor end to end, the corpus through hal run on cpu where its path is
# emu's without the device, the corpus's plain runs nothing is compared with, three of the six vendor coverages
# the fallback zoo trains with; about 8 minutes)
long:
	$(PY) -m pytest -q -m long
# hal accept on a bundled CUDA-written script against the emulator with Moore Threads' operator coverage (with a
# stability rehearsal, inference on a tiny GPT-2 and a small ONNX export's rewrite and INT8), then the same with a
# vendor plugin whose gelu is wrong (the bisection names it): build/accept-demo/*.html (docs/accept.md);
# a rejection (exit 1: a gate fails, as the emulator's speed may) is a result here, a failed run (3) is not
accept-demo: setup
	mkdir -p build/accept-demo
	PYTHONPATH=tests/accept $(PY) -c "from onnx_models import mlp_with_gelu; mlp_with_gelu('build/accept-demo/mlp.onnx')"
	$(PY) -m hal accept --target emu:musa-2.7 --steps 10 --workdir build/accept-demo/runs \
		--model tests/accept/tiny-gpt2 --batches 1,2,4,8,16,32 --onnx build/accept-demo/mlp.onnx \
		-o build/accept-demo/accept.html --json build/accept-demo/accept.json examples/cuda_train.py --steps 12 \
		|| test $$? -eq 1
	HAL_PLUGINS=wrong_gelu PYTHONPATH=tests/accept $(PY) -m hal accept --steps 6 --loss-rtol 1e-4 \
		--workdir build/accept-demo/runs-gelu -o build/accept-demo/wrong-gelu.html \
		--json build/accept-demo/wrong-gelu.json tests/accept/train_gelu_mlp.py || test $$? -eq 1
# hal accept on outside-shaped scripts (HF Trainer at 2 ranks, torchrun DDP, FSDP2) and its report in headless
# Chromium (installed here when missing and root): minutes; docs/accept.md quotes the results
accept: setup
	command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get install -y -q chromium >/dev/null; } || true
	$(PY) -m pytest -q -m "accept or slow" tests/accept
# multi-node acceptance on simulated nodes (network namespaces, needs root; skips elsewhere): hal doctor and
# hal bench --pairs across 4 nodes with one slow node, DDP communication time across 2 nodes: docs/cluster.md
cluster:
	$(PY) -m pytest -q -m cluster
# the same flow shown to a person: 4 simulated nodes, node 3's link at a quarter rate
cluster-demo:
	$(PY) tests/cluster/simnodes.py
