#!/usr/bin/env bash
# The next call on a lent GPU machine (H200 if it can be had, else H100; ~500 s expected, at most TOTAL=575 s: give
# the call timeout_s=600). What the call of 2026-11-28 (bench/README.md, "2026-11-28") left open, most important first:
#   a   every GPU test (`-m gpu`): the defaults changed after the last call (the fused projections on by default,
#       fp16 on the graph path, --compile's fused projections leaving the attention out of the trace), so the GPU
#       tests run again on them ($OUT/gpu_tests.log)
#   c   the profile at 512, one process a mode: copies (the old defaults: the card's yardstick against the H100's
#       44.8 ms), copies+fusedqkv (the defaults), compiled+fusedqkv (--compile), compiled+unmasked+fusedqkv
#       (--compile --unmask-full-batches: 27.7 % MFU on the H100, 28 % is the target, whose figures are an
#       H200's), compiled+varlen+fusedqkv (--compile --varlen-attention)
#   b   whole runs, where the profile's shapes are one step: IMDB at 512 (ftcli_copies = the defaults,
#       ftcli_nofused = the defaults before, ftcli_unmasked, the tuned HF Trainer) and MiniLM SST-2 at 128
#       (ftcli_copies, ftcli_nofused): do the fused projections pay on mixed lengths and short rows, and does
#       --unmask-full-batches pay for its extra captures over a run ($OUT/runs_console.log)
#   d   a summary ($OUT/summary.txt)
# The card: call
#   run(command="bash bench/gpu_next.sh", carry=[".gpu", ".whl"], timeout_s=600, kind="nvidia-h200")
# From the repository root, with the git-ignored .gpu and .whl carried (python bench/prepare_gpu_assets.py; it
# says whether the tracked files and both folders fit the 64 MiB a call carries):
#   bash bench/gpu_next.sh
#   GPU_NEXT_CPU_DRY=1 bash bench/gpu_next.sh    # on a CPU: the same plumbing, tiny shapes, a 2-layer BERT
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ftcli-gpu-out}
WORK=${WORK:-/tmp/ftcli-gpu-bench}
DETAIL=${DETAIL:-/tmp/ftcli-gpu-detail}
TOTAL=${TOTAL:-575}
mkdir -p "$OUT" "$DETAIL"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=true
DRY=()
T_A=130 T_C=200 T_B=220
if [ "${GPU_NEXT_CPU_DRY:-0}" = 1 ]; then
  DRY=(--device cpu --rows 96 --tiny-bert)
  TOTAL=${DRY_TOTAL:-1700} T_A=400 T_C=500 T_B=500
fi
left() { echo $((TOTAL - SECONDS)); }
lim() { local l=$(( $(left) - $2 )); if [ "$l" -lt "$1" ]; then echo "$l"; else echo "$1"; fi; }  # OWN, RESERVE
part() { echo; echo "== [$SECONDS s] $*"; }
tests() { # tests LIMIT LOG: every GPU test under faulthandler, the log kept whole
  local t=$1 log=$2; shift 2
  PYTHONPATH="${PYTHONPATH:-}:src:." timeout -s ABRT -k 5 "$t" python3 -X faulthandler -m pytest -v \
    -p no:cacheprovider -rs --durations=6 -o faulthandler_timeout=$((t - 5)) --continue-on-collection-errors \
    -m gpu tests "$@" > "$log" 2>&1  # (the lent machine has no google-cloud libraries: their tests cannot import)
  echo "pytest exit status $? (124: its ${t} s limit; 134/139: abort/segfault; the log names the last test begun)"
  grep -E "FAILED|Fatal Python error|Segmentation|Aborted|Timeout|^E " "$log" | head -20
  tail -1 "$log"
}

{
  part "start: $(date -u +%FT%TZ) on $(hostname), $(nproc) CPUs, budget ${TOTAL} s"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv,noheader 2>&1 | head -2
  if [ ! -f .gpu/minilm/model.safetensors ] || [ ! -f .gpu/data/imdb_8k.csv.xz ]; then
    echo "no .gpu/ assets here: run python bench/prepare_gpu_assets.py and carry .gpu (and .whl)"; exit 2
  fi
  if [ "${GPU_NEXT_CPU_DRY:-0}" != 1 ] && compgen -G ".whl/*.whl" > /dev/null; then
    if timeout 40 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl; then
      export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    else
      echo "wheel install failed: the machine's own transformers is used"
    fi
  fi
  python3 -c "import torch, transformers as t; print('torch', torch.__version__, '| cuda', torch.version.cuda, \
'| gpu', torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, '| transformers', t.__version__)"

  t=$(lim "$T_A" $((T_C + T_B)))
  part "a: every GPU test; ${t} s"
  tests "$t" "$OUT/gpu_tests.log"

  t=$(lim "$T_C" "$T_B")
  part "c: the profile at 512, one process a mode; ${t} s"
  modes=copies,copies+fusedqkv,compiled+fusedqkv,compiled+unmasked+fusedqkv,compiled+varlen+fusedqkv
  timeout -k 5 $((t + 10)) python3 bench/gpu.py --assets .gpu --out "$DETAIL/p512" --work "$WORK" --budget "$t" \
    --skip-cases --skip-check --profile-length 512 --profile-modes "$modes" ${DRY[@]+"${DRY[@]}"} \
    > "$DETAIL/p512_console.log" 2>&1
  echo "bench/gpu.py exit status $?"
  grep "^\[\|^profile" "$DETAIL/p512_console.log" | tail -12

  budget=$(( $(left) - 12 ))
  part "b: whole runs, IMDB at 512 and MiniLM SST-2 at 128; ${budget} s"
  for spec in "bert_imdb_512 ftcli_copies,ftcli_nofused,ftcli_unmasked,hf 0.62" \
              "minilm_sst2_128 ftcli_copies,ftcli_nofused 1.0"; do
    set -- $spec
    b=$(awk -v l="$(( $(left) - 12 ))" -v s="$3" 'BEGIN { printf "%d", l * s }')
    if [ "$b" -lt 50 ]; then echo "$1: skipped, $(left) s left"; continue; fi
    timeout -k 5 $((b + 8)) python3 bench/gpu.py --assets .gpu --out "$DETAIL/$1" --work "$WORK" --budget "$b" \
      --cases "$1" --contenders "$2" --skip-check --skip-profile ${DRY[@]+"${DRY[@]}"} \
      >> "$OUT/runs_console.log" 2>&1
    echo "$1: bench/gpu.py exit status $?"
    grep "^\[" "$OUT/runs_console.log" | tail -4
  done

  part "d: summary"
  {
    echo "GPU tests: $(grep -E '^=+ .*(passed|failed|error|skipped).* =+$' "$OUT/gpu_tests.log" | tail -1)"
    grep -E "FAILED" "$OUT/gpu_tests.log" | head -8
    [ -f "$DETAIL/p512/table.md" ] && { echo; grep "^profile" "$DETAIL/p512/table.md"; }
    [ -f "$DETAIL/p512/profile.txt" ] && grep -E "^==|^time by kind|^-- " "$DETAIL/p512/profile.txt"
    for c in bert_imdb_512 minilm_sst2_128; do [ -f "$DETAIL/$c/table.md" ] && { echo; cat "$DETAIL/$c/table.md"; }; done
  } 2>&1 | tee "$OUT/summary.txt"
  # at most 8 files come back: console, gpu_tests, summary, runs_console and these
  [ -f "$DETAIL/p512/results.json" ] && cp "$DETAIL/p512/results.json" "$OUT/p512_results.json"
  [ -f "$DETAIL/p512/profile.txt" ] && cp "$DETAIL/p512/profile.txt" "$OUT/p512_profile.txt"
  for c in bert_imdb_512 minilm_sst2_128; do
    [ -f "$DETAIL/$c/results.json" ] && cp "$DETAIL/$c/results.json" "$OUT/${c}_results.json"
  done
  echo "== [$SECONDS s] done; everything under $OUT"
} 2>&1 | tee "$OUT/console.log"
