"""Where the first steps' time goes on a GPU (issue #13's "no warm-up tax" target, not met on the H200 run).

Every one of the first N steps of ftcli's graph path is timed alone (a device sync after each), with its width
and what it did (eager warm-up, capture, replay), plus the time from `task.run` to `fit` (process_to_fit_s, after
the imports) and from `fit` to the first step. With --gpu-warmup the trainer's warm-up runs (the first-use
costs paid while the CPU tokenizes, every width warmed up and captured in `fit` before the first step) and its
seconds, from the run's results (`gpu_warmup`: prewarm_seconds, prepare_seconds, widths), are reported beside
the steps. Run it after
`bench/gpu.py` has prepared its data (the MiniLM SST-2 case in --work):

    python bench/gpu_warmup.py --assets .gpu --work /tmp/ftcli-gpu-bench --steps 80 [--gpu-warmup]

On a machine without CUDA it runs the same code eagerly (no syncs; a dry run of the plumbing).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

T_START = time.perf_counter()
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # the trainer from this checkout, installed or not


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--assets", default=".gpu")
    p.add_argument("--work", default="/tmp/ftcli-gpu-bench")
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--gpu-warmup", action="store_true",
                   help="the trainer's warm-up on (its default); without this flag the run passes --no-gpu-warmup")
    p.add_argument("--out", default="", help="write the summary and every timed step here (JSON)")
    args = p.parse_args()

    import torch

    import ftcli_trainer.loop as loop
    from ftcli_trainer import cuda_graphs, task
    from ftcli_trainer.config import parse_args

    cuda = torch.cuda.is_available()

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    case = Path(args.work) / "minilm_sst2_128"
    rows: list[dict] = []
    marks: dict[str, float] = {}
    seen: dict = {}
    orig_fit, orig_step = loop.Trainer.fit, loop.Trainer.train_step

    def fit(self):
        seen["trainer"] = self
        sync()
        marks["fit"] = time.perf_counter()
        return orig_fit(self)

    def train_step(self, group, global_group=None):
        if len(rows) >= args.steps:
            return orig_step(self, group, global_group)
        ss = self.static_steps
        before = dict(ss.counts) if ss is not None else {}
        sync()
        t0 = time.perf_counter()
        if not rows:
            marks["first_step"] = t0
        orig_step(self, group, global_group)
        sync()
        ms = 1000 * (time.perf_counter() - t0)
        after = dict(ss.counts) if ss is not None else {}
        did = [k for k in after if after.get(k, 0) != before.get(k, 0)]
        longest = int(max(self.train_enc.lengths[idx].max() for idx in group))
        width = cuda_graphs.bucket_for(longest, ss.widths) if ss is not None else longest
        rows.append({"step": len(rows) + 1, "ms": round(ms, 2), "width": width, "did": ",".join(did)})

    loop.Trainer.fit, loop.Trainer.train_step = fit, train_step
    out_dir = "/tmp/ftcli-warmup-run" + ("-warm" if args.gpu_warmup else "")
    shutil.rmtree(out_dir, ignore_errors=True)
    argv = ["--task", "csv", "--train-file", str(case / "train.csv"), "--eval-file", str(case / "eval.csv"),
            "--model", str(Path(args.assets) / "minilm"), "--epochs", "1", "--batch-size", "32",
            "--learning-rate", "1e-4", "--max-length", "128", "--label-names", "0,1", "--output-dir", out_dir,
            "--log-every", "1000000", "--cuda-graphs", "on"]
    argv.append("--gpu-warmup" if args.gpu_warmup else "--no-gpu-warmup")
    t_run = time.perf_counter()  # after the imports: where process_to_fit_s has always counted from
    cfg = parse_args(argv)
    task._setup_logging()
    r = task.run(cfg)
    end = time.perf_counter()
    shutil.rmtree(out_dir, ignore_errors=True)
    total = sum(x["ms"] for x in rows)
    last = sorted(x["ms"] for x in rows[-20:])
    by_kind: dict[str, float] = {}
    for x in rows:
        by_kind[x["did"] or "none"] = by_kind.get(x["did"] or "none", 0.0) + x["ms"]
    ss = seen["trainer"].static_steps
    warm = r.get("gpu_warmup")
    summary = {
        "gpu_warmup_flag": args.gpu_warmup, "device": "cuda" if cuda else "cpu",
        # the trainer's own account of its warm-up (absent: it did not run, e.g. no CUDA or no graph path)
        "gpu_warmup": warm,
        "warmup_seconds": round(warm.get("prewarm_seconds", 0.0) + warm.get("prepare_seconds", 0.0), 3)
        if warm else None,
        "imports_s": round(t_run - T_START, 2),  # torch and the trainer's modules, before process_to_fit_s
        "process_to_fit_s": round(marks["fit"] - t_run, 2),  # task.run to fit: load, tokenize, prewarm
        "fit_to_first_step_ms": round(1000 * (marks["first_step"] - marks["fit"]), 1) if rows else None,
        "run_to_first_step_s": round(marks["first_step"] - t_run, 2) if rows else None,
        "first_steps": len(rows), "first_steps_total_ms": round(total, 1),
        "first_steps_mean_ms": round(total / len(rows), 2) if rows else None,
        "median_of_last_20_ms": last[len(last) // 2] if last else None,
        "ms_by_what_the_step_did": {k: round(v, 1) for k, v in by_kind.items()},
        "graphs": ss.report() if ss is not None else None,
        "train_runtime_s": round(r["train_runtime"], 2), "train_samples_per_second": round(
            r["train_samples_per_second"], 1), "eval_accuracy": r.get("eval_accuracy"),
        "end_to_end_s": round(end - T_START, 2),
        "slowest": sorted(rows, key=lambda x: -x["ms"])[:12]}
    print(json.dumps(summary, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
