"""Report the tuned metric to Vertex AI's hyperparameter tuning service, at each evaluation.

Vertex reads a trial's metric from the file the `cloudml-hypertune` package writes ("To report your metrics
to Vertex AI, use the cloudml-hypertune Python package", "Create a hyperparameter tuning job",
https://docs.cloud.google.com/vertex-ai/docs/training/using-hyperparameter-tuning, read 2026-11-26). That
package (GoogleCloudPlatform/cloudml-hypertune, hypertune/hypertune.py; last released as 0.1.0.dev6) is a dozen
lines: the path from CLOUD_ML_HP_METRIC_FILE (default /tmp/hypertune/output.metrics), rewritten on every report
with the last 100 entries as JSON lines {"timestamp", "trial" (CLOUD_ML_TRIAL_ID or 0), TAG: str(value),
"global_step": str(step)}. The same format is written here rather than installing an unmaintained pre-release
into every trial.
"""

from __future__ import annotations

import collections
import json
import math
import os
import secrets
import time
from collections.abc import Mapping
from pathlib import Path

DEFAULT_PATH = "/tmp/hypertune/output.metrics"
KEEP = 100


class Reporter:
    def __init__(self, tag: str, env: Mapping[str, str] = os.environ) -> None:
        self.tag = tag
        self.path = Path(env.get("CLOUD_ML_HP_METRIC_FILE", DEFAULT_PATH))
        self.trial = str(env.get("CLOUD_ML_TRIAL_ID", 0))
        self.entries: collections.deque = collections.deque(maxlen=KEEP)

    def __call__(self, step: int, results: dict) -> None:
        """Report `results[tag]` at `step` (the trainer calls this after each evaluation)."""
        value = results.get(self.tag)
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            return  # a NaN would make the trial unrankable; Vertex treats a trial without a value as infeasible
        self.entries.append({"timestamp": time.time(), "trial": self.trial, self.tag: str(float(value)),
                             "global_step": str(int(step))})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # The default folder is in the shared /tmp: a fixed temporary name there (output.tmp) is one that another
        # user can create first as a link to a file of ours, which the write would then overwrite. A random name
        # opened with O_CREAT | O_EXCL is new (a link there is not followed), with the mode open() gives (the umask
        # applied: whatever reads the file for Vertex may not be this user); the rename replaces a link, never
        # follows it.
        tmp = self.path.parent / f".{self.path.name}.{secrets.token_hex(8)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            with os.fdopen(fd, "w") as f:
                f.write("".join(json.dumps(e, sort_keys=True) + "\n" for e in self.entries))
            os.replace(tmp, self.path)  # the service may read while we write: it sees the old file or the new one
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
