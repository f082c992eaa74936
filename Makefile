# Two commands for a newcomer:  make demo  (set up + run the main job)  and  make test.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of torch, pinned here rather than in setup.cfg so that NPU and GPU hosts
# keep their own torch. Where plain pip would fetch a CUDA build, point TORCH_INDEX at
# https://download.pytorch.org/whl/cpu.
TORCH ?= torch==2.13.0
TORCH_INDEX ?=
OUT ?= build/demo

.PHONY: demo test bench clean

demo: $(VENV)/.installed
	$(BIN)/rlparity inspect sample:tinywalker
	$(BIN)/rlparity export sample:tinywalker -o $(OUT)/TinyWalker.onnx
	$(BIN)/rlparity validate sample:tinywalker --json $(OUT)/TinyWalker.report.json
	$(BIN)/rlparity validate sample:tinybranches --json $(OUT)/TinyBranches.report.json --save-run $(OUT)/TinyBranches.run
	$(BIN)/rlparity compare $(OUT)/TinyBranches.run
	$(BIN)/rlparity diff $(OUT)/TinyWalker.onnx --ref rlparity/samples/mlagents/TinyWalker/TinyWalker-1000.onnx
	$(BIN)/rlparity validate sample:cartpole --json $(OUT)/CartPole.report.json
	$(BIN)/rlparity rollout sample:cartpole --env seals/CartPole-v0 --episodes 3 --json $(OUT)/CartPole.rollout.json
	$(BIN)/rlparity package sample:tinywalker -o $(OUT)/TinyWalker --force
	$(BIN)/rlparity publish $(OUT)/TinyWalker --repo hf://OWNER/TinyWalker --dry-run
	$(BIN)/rlparity validate sample:tinyhopper --json $(OUT)/TinyHopper.report.json
	$(BIN)/rlparity rollout sample:tinyhopper --env Hopper-v5 --episodes 2 --json $(OUT)/TinyHopper.rollout.json
	$(BIN)/rlparity npu-check sample:tinywalker --device cpu --json $(OUT)/TinyWalker.npu-check.json
	$(BIN)/rlparity bench sample:tinywalker --batch 1,8,64 --runs 100 --json $(OUT)/TinyWalker.bench.json --plot $(OUT)/TinyWalker.bench.png

test: $(VENV)/.installed
	$(BIN)/python -m pytest -q

bench: $(VENV)/.installed
	$(BIN)/python benchmarks/mlagents_latency.py
	$(BIN)/python benchmarks/sb3_rollout_steps.py
	$(BIN)/python benchmarks/dt_rollout_steps.py
	$(BIN)/python benchmarks/bench_vs_bare_loop.py

$(VENV)/.installed: setup.cfg pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[test,envs,plot]"
	touch $@

clean:
	rm -rf $(VENV) build *.egg-info
