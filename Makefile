PY ?= python3
.PHONY: setup demo test bench gpu-check corpus-cuda-torch
setup:
	bash scripts/setup.sh
# the main job on the embedded defaults
demo: setup
	bash scripts/demo.sh
test: setup
	$(PY) -m pytest -q
bench: setup
	bash scripts/bench.sh
# the CUDA path on a lent GPU: evidence goes to docs/validation/
gpu-check:
	bash scripts/gpu_check.sh
# the corpus of CUDA-written scripts under PyPI's CUDA build of torch, without a GPU (large
# download: not in CI)
corpus-cuda-torch:
	bash scripts/corpus_cuda_torch.sh
