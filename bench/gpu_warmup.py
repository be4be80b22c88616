"""Where the first steps' time goes on a GPU (issue #13's "no warm-up tax" target, not met on the H200 run).

Every one of the first N steps of ftcli's graph path is timed alone (a device sync after each), with its width
and what it did (eager warm-up, capture, replay), plus the time from `fit` to the first step. Run it after
`bench/gpu.py` has prepared its data (the MiniLM SST-2 case in --work):

    python bench/gpu_warmup.py --assets .gpu --work /tmp/ftcli-gpu-bench --steps 80
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--assets", default=".gpu")
    p.add_argument("--work", default="/tmp/ftcli-gpu-bench")
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--out", default="")
    args = p.parse_args()

    import torch

    import ftcli_trainer.loop as loop
    from ftcli_trainer import cuda_graphs, task
    from ftcli_trainer.config import parse_args

    case = Path(args.work) / "minilm_sst2_128"
    rows: list[dict] = []
    marks: dict[str, float] = {}
    orig_fit, orig_step = loop.Trainer.fit, loop.Trainer.train_step

    def fit(self):
        torch.cuda.synchronize()
        marks["fit"] = time.perf_counter()
        return orig_fit(self)

    def train_step(self, group, global_group=None):
        if len(rows) >= args.steps:
            return orig_step(self, group, global_group)
        ss = self.static_steps
        before = dict(ss.counts) if ss is not None else {}
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        if not rows:
            marks["first_step"] = t0
        orig_step(self, group, global_group)
        torch.cuda.synchronize()
        ms = 1000 * (time.perf_counter() - t0)
        ss = self.static_steps
        after = dict(ss.counts) if ss is not None else {}
        did = [k for k in after if after.get(k, 0) != before.get(k, 0)]
        longest = int(max(self.train_enc.lengths[idx].max() for idx in group))
        width = cuda_graphs.bucket_for(longest, ss.widths) if ss is not None else longest
        rows.append({"step": len(rows) + 1, "ms": round(ms, 2), "width": width, "did": ",".join(did)})

    loop.Trainer.fit, loop.Trainer.train_step = fit, train_step
    t_start = time.perf_counter()
    cfg = parse_args(["--task", "csv", "--train-file", str(case / "train.csv"), "--eval-file",
                      str(case / "eval.csv"), "--model", str(Path(args.assets) / "minilm"), "--epochs", "1",
                      "--batch-size", "32", "--learning-rate", "1e-4", "--max-length", "128", "--label-names", "0,1",
                      "--output-dir", "/tmp/ftcli-warmup-run", "--log-every", "1000000", "--cuda-graphs", "on"])
    task._setup_logging()
    task.run(cfg)
    total = sum(r["ms"] for r in rows)
    steady = sorted(r["ms"] for r in rows[-20:])[10]
    by_kind: dict[str, float] = {}
    for r in rows:
        by_kind[r["did"] or "none"] = by_kind.get(r["did"] or "none", 0.0) + r["ms"]
    summary = {"process_to_fit_s": round(marks["fit"] - t_start, 2),
               "fit_to_first_step_ms": round(1000 * (marks["first_step"] - marks["fit"]), 1),
               "first_steps": len(rows), "first_steps_total_ms": round(total, 1),
               "median_of_last_20_ms": steady, "ms_by_what_the_step_did": {k: round(v, 1) for k, v in by_kind.items()},
               "slowest": sorted(rows, key=lambda r: -r["ms"])[:12]}
    print(json.dumps(summary, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
