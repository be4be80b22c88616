"""Rebuild the bundled offline sample (src/ftcli_trainer/sample/) from GLUE SST-2 in ../shared/data.

train: 8,000 rows drawn at random (seed 0) from SST-2 train (phrases and sentences);
validation: the whole GLUE dev set (872 full sentences), never trained on.
Usage: python scripts/make_sample.py [SHARED_DATA_DIR]
"""

import csv
import gzip
import io
import random
import sys
from pathlib import Path

N_TRAIN = 8000


def main() -> None:
    src = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "shared" / "data") / "sst2"
    dest = Path(__file__).resolve().parents[1] / "src" / "ftcli_trainer" / "sample"
    dest.mkdir(parents=True, exist_ok=True)
    with open(src / "train.csv", newline="", encoding="utf-8") as f:
        train = list(csv.DictReader(f))
    with open(src / "validation.csv", newline="", encoding="utf-8") as f:
        validation = list(csv.DictReader(f))
    random.Random(0).shuffle(train)
    for name, rows in (("sst2_train.csv.gz", train[:N_TRAIN]), ("sst2_validation.csv.gz", validation)):
        # mtime=0 and no file name in the header: the same rows always give the same bytes
        with open(dest / name, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", filename="", mtime=0) as gz, \
                io.TextIOWrapper(gz, encoding="utf-8", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(["text", "label"])
            for r in rows:
                w.writerow([r["text"].strip(), r["label"]])
        print(f"{dest / name}: {len(rows)} rows")


if __name__ == "__main__":
    main()
