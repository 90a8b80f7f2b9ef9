#!/usr/bin/env bash
# Every GPU check in one command, on a machine with PyTorch and CUDA and no internet:
# graphtree installed from this working tree, the CUDA tests, the training step of every cell
# (benchmarks/gpu_step.py: eager, replayed, the plain level loop and cuDNN's LSTM at batch 25 and 256),
# and one SST epoch per model. Results and logs go to one folder.
#
#   bash benchmarks/gpu.sh [RESULTS_DIR]      (default benchmarks/results/gpu)
#   SST=path/to/trainDevTestTrees_PTB.zip     (default ../shared/data/sst/trainDevTestTrees_PTB.zip)
#
# Each stage has a time limit, so that the whole run ends within 8 minutes and what finished is kept.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-benchmarks/results/gpu}
sst=${SST:-../shared/data/sst/trainDevTestTrees_PTB.zip}
mkdir -p "$out"
export GRAPHTREE_NATIVE=0 PYTHONUNBUFFERED=1  # the compiled kernels are the CPU's; a GPU run needs none
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$out/install.log" 2>&1 \
    || export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv | tee "$out/gpu.txt"
python3 -c "import torch, torch_geometric; print('torch', torch.__version__, 'pyg', torch_geometric.__version__)" \
    | tee -a "$out/gpu.txt"

timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_replay.py tests/test_cuda.py 2>&1 \
    | tee "$out/tests.log" | tail -n 15
timeout 200 python3 benchmarks/gpu_step.py --device cuda --reps 3 --sst "$sst" --out "$out/step.json" 2>&1 \
    | tee "$out/step.log" | grep -v Warning
timeout 130 python3 benchmarks/gpu_step.py --device cuda --no-grid --epoch --sst "$sst" --out "$out/epoch.json" 2>&1 \
    | tee "$out/epoch.log" | grep -v Warning
