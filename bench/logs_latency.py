"""Latency of `ftcli logs`: time from a line being written to Cloud Logging to it appearing on screen.

Target (issue "ftcli logs"): within 3 s (gcloud ai custom-jobs stream-logs polls every 60 s). Runs the real
`ftcli logs` (default intervals) in a child process against the test emulators (Cloud Logging and Vertex
JobService over gRPC), writes lines at random moments and reads them back from its stdout.

  python bench/logs_latency.py [--lines 20]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.emulators.cloud_logging import LoggingEmulator  # noqa: E402
from tests.emulators.vertex import VertexEmulator  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lines", type=int, default=20)
    args = p.parse_args()
    with VertexEmulator() as vertex, LoggingEmulator(project="bench-project") as logs:
        job = vertex.client().create_custom_job(parent="projects/bench-project/locations/us-central1", custom_job={
            "display_name": "bench", "job_spec": {"worker_pool_specs": [{
                "machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 1,
                "container_spec": {"image_uri": "x"}}]}})
        vertex.set_state(job.name, "RUNNING")
        tmp = tempfile.mkdtemp(prefix="ftcli-bench-")
        env = {**os.environ, "FTCLI_VERTEX_ENDPOINT": vertex.endpoint, "FTCLI_LOGGING_ENDPOINT": logs.endpoint,
               "FTCLI_STATE_DIR": tmp, "FTCLI_CONFIG": f"{tmp}/c.toml"}
        proc = subprocess.Popen([sys.executable, "-m", "ftcli.cli", "logs", job.name, "--json"], env=env,
                                stdout=subprocess.PIPE, text=True, bufsize=1)
        written: dict[str, float] = {}
        seen: dict[str, float] = {}

        def reader():
            for line in proc.stdout:
                if line.startswith("{") and "text" in (obj := json.loads(line)):
                    seen[obj["text"]] = time.perf_counter()

        t = threading.Thread(target=reader, daemon=True)
        t.start()
        if not logs.wait_for_tails(1, timeout=30):
            sys.exit("ftcli logs never opened a tail stream")
        job_id = job.name.rsplit("/", 1)[-1]
        for i in range(args.lines):
            time.sleep(random.uniform(0.1, 1.5))
            text = f"bench line {i}"
            written[text] = time.perf_counter()
            logs.write_line(job_id, "workerpool0-0", text)
        time.sleep(4)
        vertex.set_state(job.name, "SUCCEEDED")
        proc.wait(timeout=60)
        lat = [seen[k] - written[k] for k in written if k in seen]
        missing = len(written) - len(lat)
        print("| lines | missing | median s | max s | ftcli logs exit |\n|---|---|---|---|---|")
        print(f"| {len(written)} | {missing} | {statistics.median(lat):.2f} | {max(lat):.2f} | {proc.returncode} |")


if __name__ == "__main__":
    main()
