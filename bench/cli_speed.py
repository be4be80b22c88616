"""How long the launcher takes where a user waits on it: `ftcli --help` and `ftcli train --dry-run`.

Targets (issue "ftcli train"): --help <= 0.3 s, train --dry-run <= 2 s on a 2-core machine, with no torch
and no google.cloud.aiplatform import. Each command runs N times in a fresh process; median and best are
reported, plus the heavy modules each one imported (there should be none). Python's bytecode is cached (in a
temporary folder) by an untimed first run, as an installed ftcli has it: with PYTHONDONTWRITEBYTECODE set, as on the
development machine, every run compiled ftcli's modules again (60 ms of `--help`).

  python bench/cli_speed.py [-n 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HEAVY = ("torch", "transformers", "datasets", "google.cloud.aiplatform", "google.cloud.aiplatform_v1",
         "google.cloud.storage", "google.cloud.logging_v2", "grpc", "numpy")


def timed(args: list[str], env: dict[str, str], n: int) -> list[float]:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "ftcli.cli", *args], env=env, capture_output=True)
        times.append(time.perf_counter() - t)
        if r.returncode != 0:
            sys.exit(f"ftcli {' '.join(args)} failed: {r.stderr.decode()[-2000:]}")
    return times


def heavy_imports(args: list[str], env: dict[str, str]) -> list[str]:
    code = ("import sys\nfrom ftcli.cli.app import app\n"
            f"try:\n    app({args!r})\nexcept SystemExit:\n    pass\n"
            f"print('HEAVY:' + ','.join(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout
    line = next(x for x in out.splitlines() if x.startswith("HEAVY:"))
    return [m for m in line[len("HEAVY:"):].split(",") if m]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", type=int, default=10)
    args = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="ftcli-bench-")
    env = {**os.environ, "FTCLI_CONFIG": f"{tmp}/config.toml", "FTCLI_STATE_DIR": tmp,
           "CLOUDSDK_CONFIG": f"{tmp}/gcloud", "COLUMNS": "100", "PYTHONPYCACHEPREFIX": f"{tmp}/pycache"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    commands = {
        "ftcli --help": ["--help"],
        "ftcli train --dry-run": ["train", "--task", "imdb", "--gpu", "A100x8", "--replicas", "2",
                                  "--reduction-server", "2", "--project", "my-project", "--bucket", "gs://my-bucket",
                                  "--dry-run"],
    }
    print("| command | median s | best s | heavy imports |\n|---|---|---|---|")
    for name, argv in commands.items():
        timed(argv, env, 1)  # writes the bytecode cache
        times = timed(argv, env, args.n)
        heavy = heavy_imports(argv, env)
        print(f"| `{name}` | {statistics.median(times):.3f} | {min(times):.3f} | {', '.join(heavy) or 'none'} |")


if __name__ == "__main__":
    main()
