#!/usr/bin/env bash
# Every GPU check in one command, on a machine with PyTorch and CUDA and no internet, in parts that each have a
# time limit of their own (a part cut short keeps what it wrote; the next part still runs):
#
#   env      the card, driver, torch and PyG versions                                    (gpu.txt)
#   tests    the captured-graph tests: tests/test_replay.py, tests/test_cuda.py, and the replayed trainer
#            against the plain one on the GPU (tests/test_replay_trainer.py -k cuda)     (tests.log)
#   data     SST processed into datasets/ and GloVe 50d loaded once, before anything is timed (a short CPU run
#            of experiments/sst.py); without GloVe the epochs use random vectors, and say so (data.log)
#   step     benchmarks/gpu_step.py: the training step of every cell (Child-Sum, N-ary, S-LSTM, LSTM-RNN,
#            head-lexicalized, top-down, BiConTree) at batch 25 and 256, eager and replayed, each as a ratio
#            to cuDNN's nn.LSTM over the same sentences                                  (step.json, step.log)
#   epochs   benchmarks/gpu_epochs.py: experiments/sst.py --device cuda per model, its epochs (the first, with
#            its captures, included) against the two-thread CPU epoch                    (epochs.json, epochs.log)
#   tables   the step and epoch tables in docs/performance.md's form                     (tables.md)
#
# Every part's exit status, limit and seconds go to parts.jsonl. The limits add up to 9.4 minutes; the parts
# take about 7 on an H200 (the models with a top-down pass, eager today, may not finish their SST epoch in time:
# the summary says so).
#
#   bash benchmarks/gpu.sh [--dry] [--out DIR]
#
#   --out DIR / $GPU_RESULTS   where the results go (default runs/gpu/<UTC time>, which git ignores). The
#                              committed benchmarks/results/ is refused unless $WRITE_COMMITTED=1.
#   --dry                      on the CPU, tiny sizes: checks that every part runs (no GPU numbers)
#   $SST                       trainDevTestTrees_PTB.zip for gpu_step.py (default: where the experiments read SST)
#   $GRAPHTREE_MIRROR          where experiments/sst.py finds the corpus (default ../shared/data beside the repo)
#   $EPOCHS_CPU=1              also measure the CPU's two-thread epoch on this machine (else the committed one)
set -uo pipefail
cd "$(dirname "$0")/.."
dry=0
out=${GPU_RESULTS:-}
while [ $# -gt 0 ]; do
    case $1 in
        --dry) dry=1 ;;
        --out) out=$2; shift ;;
        *) out=$1 ;;  # the results folder, as the older form took it
    esac
    shift
done
stamp=$(date -u +%Y%m%dT%H%M%SZ)
[ -n "$out" ] || out=runs/gpu$([ $dry = 1 ] && echo -dry)/$stamp
case "$(realpath -m "$out")/" in
    "$(realpath -m benchmarks/results)"/*|"$(realpath -m experiments/results)"/*)
        if [ "${WRITE_COMMITTED:-0}" != 1 ]; then
            echo "gpu.sh: $out is committed reference data; give another --out (or WRITE_COMMITTED=1)" >&2
            exit 2
        fi ;;
esac
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export GRAPHTREE_NATIVE=0  # the compiled kernels are the CPU's; a GPU run needs none (and builds none)
echo "results in $out (commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown))"

# part NAME LIMIT COMMAND...: run COMMAND under LIMIT seconds, its output in NAME.log, a line in parts.jsonl.
part() {
    local name=$1 limit=$2 start=$SECONDS rc
    shift 2
    echo "== $name (limit ${limit} s): $*"
    timeout --kill-after=10 "$limit" "$@" >"$out/$name.log" 2>&1
    rc=$?
    printf '{"part": "%s", "rc": %d, "timed_out": %s, "limit_s": %d, "seconds": %d}\n' "$name" "$rc" \
        "$([ $rc = 124 ] || [ $rc = 137 ] && echo true || echo false)" "$limit" "$((SECONDS - start))" \
        >>"$out/parts.jsonl"
    grep -v -e Warning -e warnings.warn -e '^  return Variable' "$out/$name.log" | tail -n 24
    return $rc
}

if [ $dry = 1 ]; then
    part env 30 python3 -c "import torch, torch_geometric; print('torch', torch.__version__, 'pyg', \
torch_geometric.__version__, 'cuda', torch.cuda.is_available())"
    part tests 240 python3 -m pytest -q -p no:cacheprovider tests/test_replay_trainer.py -k "sst and nary or cuda"
    part step 240 python3 benchmarks/gpu_step.py --device cpu --cells nary,bicontree --batch-sizes 25 \
        --workload 25 --reps 1 --out "$out/step.json"
    part epochs 300 python3 benchmarks/gpu_epochs.py --dry --models nary bicontree --timeout 140 \
        --out "$out/epochs.json"
else
    sst=${SST:-}
    part env 20 bash -c "nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv; python3 -c \
\"import torch, torch_geometric; print('torch', torch.__version__, 'pyg', torch_geometric.__version__)\""
    cp "$out/env.log" "$out/gpu.txt"
    part tests 75 python3 -m pytest -q -p no:cacheprovider tests/test_replay.py tests/test_cuda.py \
        tests/test_replay_trainer.py -k "(cuda or gpu or replay_reads or padded_step) and not short_form"
    part step 110 python3 benchmarks/gpu_step.py --device cuda --reps 3 ${sst:+--sst "$sst"} --out "$out/step.json"
    emb=glove50
    part data 90 python3 experiments/sst.py --model nary --quick --epochs 1 --device cpu --replay off \
        --embeddings glove50 --no-progress --out "$out/data-run" || emb=random
    [ $emb = random ] && echo "no GloVe 50d here: the epochs use random vectors" | tee -a "$out/data.log"
    cpu=()
    [ "${EPOCHS_CPU:-0}" = 1 ] && cpu=(--cpu)
    part epochs 210 python3 benchmarks/gpu_epochs.py --timeout 45 --embeddings $emb "${cpu[@]}" \
        --out "$out/epochs.json"
fi
part tables 60 python3 benchmarks/gpu_epochs.py --table "$out/epochs.json" --step "$out/step.json"
cp "$out/tables.log" "$out/tables.md"
echo "parts:"; cat "$out/parts.jsonl"
