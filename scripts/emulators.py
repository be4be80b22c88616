"""Start the GCS, Vertex (jobs really run) and Cloud Logging emulators together, to try ftcli offline by hand.

  python scripts/emulators.py            # prints the variables to export, then serves until Ctrl-C

Then, in another shell, with those variables exported:

  ftcli train --task csv --train-file data.csv --gpu none --epochs 1 --model minilm
  ftcli jobs list · ftcli logs last · ftcli download last ./model · ftcli predict ./model "great film"
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.emulators.cloud_logging import LoggingEmulator  # noqa: E402
from tests.emulators.gcs import GcsEmulator  # noqa: E402
from tests.emulators.runner import RunningVertexEmulator  # noqa: E402

PROJECT = "local-project"
BUCKET = "ftcli-local"


def main() -> None:
    with GcsEmulator() as gcs, LoggingEmulator(project=PROJECT) as logs:
        gcs.create_bucket(BUCKET)
        vertex = RunningVertexEmulator(gcs.url, logs)
        vertex.start()
        try:
            print("# emulators ready; export these in the shell you run ftcli from:")
            for key, value in {**gcs.env(), "FTCLI_VERTEX_ENDPOINT": vertex.endpoint,
                               "FTCLI_LOGGING_ENDPOINT": logs.endpoint, "FTCLI_PROJECT": PROJECT,
                               "FTCLI_BUCKET": f"gs://{BUCKET}", "FTCLI_REGION": "us-central1"}.items():
                print(f"export {key}={value}")
            sys.stdout.flush()
            stop = threading.Event()
            signal.signal(signal.SIGINT, lambda *_: stop.set())
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            stop.wait()
        finally:
            vertex.stop()


if __name__ == "__main__":
    main()
