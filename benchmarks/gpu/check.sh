#!/bin/bash
# The GPU checks of learner.device=cuda, as run on an NVIDIA H200 machine with no network
# (2026-12-04): tests/test_cuda_learner.py and test_learner_device.py on the GPU, then
# benchmarks/learner_device.py on CPU and CUDA at three MLP and three CNN settings. Results: $OUT (default /tmp/gpu_check).
#
# That machine had torch with CUDA but not hdppo's other dependencies; they travel as wheels in
# .whl/ (pydantic, pydantic-core, annotated-types, typing-inspection, typing-extensions,
# gymnasium, farama-notifications, pettingzoo, for CPython 3.12 manylinux). Ray's wheel (79 MB)
# was over that machine's transfer limit, so ray_stub/ stands in for it: these checks use
# `ray.backend: local` only, and anything that reaches for Ray fails loudly.
# On a GPU machine with `make install` done, run the pytest and benchmark lines alone.
set -u
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MUJOCO_GL=egl
HERE=$(cd "$(dirname "$0")" && pwd)
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 11
  export PYTHONPATH=/tmp/site:$HERE/ray_stub
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/hd . > "$OUT/install.log" 2>&1 \
    || { tail -30 "$OUT/install.log"; exit 12; }
  export PYTHONPATH=/tmp/hd:$PYTHONPATH
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
python3 -c "import torch, hdppo.platform.learner; print(torch.__version__, torch.cuda.get_device_name(0))" || exit 13
python3 -m pytest -q -p no:cacheprovider --timeout 300 tests/test_cuda_learner.py tests/test_learner_device.py \
  -k "not auto_trains_on_ray" -rs 2>&1 | tee "$OUT/pytest.log" | tail -40
python3 benchmarks/learner_device.py --results "$OUT/ld" --repeats 5 2>&1 | tail -14
python3 benchmarks/learner_device.py --results "$OUT/ld16" --threads 16 --repeats 5 2>&1 | tail -14
python3 benchmarks/learner_device.py --results "$OUT/ldbig" --threads 16 --batch 32768 --minibatch 4096 \
  --hidden 256x256,512x512 --repeats 3 2>&1 | tail -14
python3 benchmarks/learner_device.py --net minatar --results "$OUT/minatar" --repeats 5 2>&1 | tail -9
python3 benchmarks/learner_device.py --net minatar --threads 16 --results "$OUT/minatar16" --repeats 5 2>&1 | tail -9
python3 benchmarks/learner_device.py --net minatar --threads 16 --batch 16384 --minibatch 4096 --results "$OUT/minatarbig" \
  --repeats 3 2>&1 | tail -9
