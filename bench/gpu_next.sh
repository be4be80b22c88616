#!/usr/bin/env bash
# The one call for the next lent GPU machine (H100 or H200; ~300 s expected, at most TOTAL=410 s): does the
# rebuilt --gpu-warmup pay off end to end, and what crashed in the GPU tests last time? Most important first:
#   a   the GPU-only tests, full log ($OUT/gpu_tests.log) under -X faulthandler, so a fatal error names its test
#       and prints the Python stack (a hang gets SIGABRT at its limit: faulthandler dumps every thread)
#   b   bench/gpu.py, MiniLM SST-2: check (graph path and prepare() vs eager), then ftcli_graphs, ftcli_warm,
#       hf interleaved twice ($OUT/minilm/)
#   c   bench/gpu_warmup.py without and with --gpu-warmup, 80 steps each ($OUT/first_steps*.json)
#   b2  if the time is left: bench/gpu.py, BERT-base IMDB @512, ftcli_graphs, ftcli_warm, hf once ($OUT/imdb/)
#   d   a summary: the tables and the first steps' key numbers ($OUT/summary.txt)
# From the repository root, with the git-ignored .gpu and .whl carried (python bench/prepare_gpu_assets.py):
#   bash bench/gpu_next.sh
#   GPU_NEXT_CPU_DRY=1 bash bench/gpu_next.sh    # on a CPU: the same plumbing, 96 rows, a 2-layer BERT
# Every part has a hard `timeout` within TOTAL; what a part leaves unused goes to b2.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ftcli-gpu-out}
WORK=${WORK:-/tmp/ftcli-gpu-bench}
TOTAL=${TOTAL:-410}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=true
DRY=()
# Each part's own limit (s); a part also never takes what the parts after it need at the least (see lim).
T_A=90 B_BUDGET=210 T_C=40 B2_MIN=75
if [ "${GPU_NEXT_CPU_DRY:-0}" = 1 ]; then
  # A 2-core CPU is ~5-20x slower than the GPU machine: the same parts with room to finish.
  DRY=(--device cpu --rows 96 --tiny-bert)
  TOTAL=${DRY_TOTAL:-1600} T_A=400 B_BUDGET=700 T_C=150 B2_MIN=150
fi
left() { echo $((TOTAL - SECONDS)); }
lim() { # lim OWN RESERVE: OWN seconds, or less so that RESERVE seconds are left for what follows
  local l=$(( $(left) - $2 )); if [ "$l" -lt "$1" ]; then echo "$l"; else echo "$1"; fi
}
part() { echo; echo "== [$SECONDS s] $*"; }

{
  part "start: $(date -u +%FT%TZ) on $(hostname), $(nproc) CPUs, budget ${TOTAL} s"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv,noheader 2>&1 | head -2
  if [ ! -f .gpu/minilm/model.safetensors ]; then
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
'| gpu', torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, '| transformers', t.__version__, \
'from', t.__file__.rsplit('/', 2)[0])"
  git log -1 --format='commit %h %s' 2>/dev/null || true

  part "a: GPU tests (full log: $OUT/gpu_tests.log)"
  t=$(lim "$T_A" $((150 + 2 * T_C)))  # b keeps at least 150 s: one repetition and the check
  PYTHONPATH="${PYTHONPATH:-}:src:." timeout -s ABRT -k 5 "$t" python3 -X faulthandler -m pytest -v \
    -p no:cacheprovider -rs --durations=12 -o faulthandler_timeout=60 \
    tests/trainer/test_cuda_graphs.py tests/trainer/test_tasks.py -k "gpu or cuda" > "$OUT/gpu_tests.log" 2>&1
  echo "pytest exit status $? (124: its ${t} s limit, stacks dumped; 134/139: abort/segfault; the log names the" \
    "last test begun)"
  grep -E "FAILED|ERROR|SKIPPED|Fatal Python error|Segmentation|Aborted|Timeout|^E " "$OUT/gpu_tests.log" \
    | grep -v "^SKIPPED \[" | head -30
  tail -2 "$OUT/gpu_tests.log"

  part "b: MiniLM SST-2, ftcli_graphs / ftcli_warm / hf interleaved x2 ($OUT/minilm)"
  t=$(lim "$B_BUDGET" $((2 * T_C + 35)))
  timeout -k 5 $((t + 10)) python3 bench/gpu.py --assets .gpu --out "$OUT/minilm" --work "$WORK" \
    --budget "$t" --cases minilm_sst2_128 --contenders ftcli_graphs,ftcli_warm,hf --repeat 2 \
    --skip-profile ${DRY[@]+"${DRY[@]}"} > "$OUT/minilm_console.log" 2>&1
  echo "bench/gpu.py exit status $?"
  grep "^\[" "$OUT/minilm_console.log" | tail -12

  for warm in "" --gpu-warmup; do
    name=first_steps${warm:+_warm}
    part "c: the first 80 steps ${warm:-without --gpu-warmup} ($OUT/$name.json)"
    timeout -k 5 "$(lim "$T_C" 20)" python3 bench/gpu_warmup.py --assets .gpu --work "$WORK" --steps 80 $warm \
      --out "$OUT/$name.json" > "$OUT/$name.log" 2>&1
    echo "bench/gpu_warmup.py exit status $?"
    grep -v '^step \|^eval @' "$OUT/$name.log" | grep -v '^ *[{}\[]\|"step"\|"ms"\|"width"\|"did"' | tail -25
  done

  budget=$(( $(left) - 20 ))
  if [ "$budget" -ge "$B2_MIN" ]; then
    part "b2: BERT-base IMDB @512, ftcli_graphs / ftcli_warm / hf once, ${budget} s ($OUT/imdb)"
    timeout -k 5 $((budget + 10)) python3 bench/gpu.py --assets .gpu --out "$OUT/imdb" --work "$WORK" \
      --budget "$budget" --cases bert_imdb_512 --contenders ftcli_graphs,ftcli_warm,hf --skip-check \
      --skip-profile ${DRY[@]+"${DRY[@]}"} > "$OUT/imdb_console.log" 2>&1
    echo "bench/gpu.py exit status $?"
    grep "^\[" "$OUT/imdb_console.log" | tail -8
  else
    part "b2: skipped, $(left) s left (needs $((B2_MIN + 20)))"
  fi

  part "d: summary"
  {
    echo "GPU tests: $(grep -E '^=+ .*(passed|failed|error).* =+$' "$OUT/gpu_tests.log" | tail -1)"
    grep -E "FAILED|ERROR|Fatal Python error" "$OUT/gpu_tests.log" | head -8
    for t in minilm imdb; do
      [ -f "$OUT/$t/table.md" ] && { echo; cat "$OUT/$t/table.md"; }
    done
    echo
    python3 - "$OUT" <<'EOF'
import json, sys
from pathlib import Path

keys = ("gpu_warmup_flag", "warmup_seconds", "imports_s", "process_to_fit_s", "fit_to_first_step_ms",
        "run_to_first_step_s", "first_steps_total_ms", "first_steps_mean_ms", "median_of_last_20_ms",
        "train_runtime_s", "end_to_end_s", "graphs", "ms_by_what_the_step_did")
for name in ("first_steps", "first_steps_warm"):
    f = Path(sys.argv[1]) / f"{name}.json"
    if not f.exists():
        print(f"{name}: no result (see {name}.log)")
        continue
    s = json.loads(f.read_text())["summary"]
    print(f"{name}: " + ", ".join(f"{k} {s.get(k)}" for k in keys if k in s))
    print(f"  gpu_warmup: {s.get('gpu_warmup')}; slowest: "
          + ", ".join(f"#{r['step']} {r['ms']} ms w{r['width']} {r['did']}" for r in s.get("slowest", [])[:6]))
EOF
  } 2>&1 | tee "$OUT/summary.txt"
  echo "== [$SECONDS s] done; everything under $OUT"
} 2>&1 | tee "$OUT/console.log"
