# Two commands for a new user: `make train` and `make test`. Both create .venv on first use.
# torch==2.13.0 (a CPU build) is installed before the project: an unpinned torch would pull a
# CUDA build of several GB. The bench extra (MAgent2, MPE, Stable-Baselines3) lets the tests
# cover those envs and the benchmarks run; the domains extra (OR-Tools, MinAtar, highway-env) the
# job-shop oracle, the pixel games and driving; the export extra (onnx, onnxscript, onnxruntime) lets
# tests/test_export.py run the exported ONNX files.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.hdppo-installed
CONFIG ?= configs/default.yaml
# A new run dir each time, so that `make train` can be run again; `hdppo train` itself never
# overwrites a run dir (continue one with --resume).
RUN_DIR ?= runs/$(basename $(notdir $(CONFIG)))-$(shell date +%Y%m%d-%H%M%S)

.PHONY: install train test test-fast bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[test,bench,export,domains]'
	@touch $(STAMP)

train: $(STAMP)
	$(VENV)/bin/hdppo train $(CONFIG) --run-dir $(RUN_DIR)

test: $(STAMP)
	$(PY) -m pytest -q --durations=20

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not learning and not cluster"

clean:
	rm -rf runs .pytest_cache
