"""What could close issue #13's MFU gap at 512 tokens, measured as microbenchmarks on the GPU this machine has.

bench/README.md ("Where the time goes at 512 tokens") splits BERT-base's 44 ms step over 32 x 512 tokens on an
H100: GEMMs 29 % (at 68 % of the card's peak), attention 17 % (cuDNN's padded-mask kernels, at 13 % of peak), and
54 % memory-bound work on activations. This script times the two candidates that could move it:

  attention  one BERT-base attention call, [32, 12, W, 64] bf16, forward + backward, for rows that fill the width
             and for a length-sorted batch whose rows are a little shorter than it (ftcli's batches), under each
             way of masking the padding that torch offers: the HF-style [B, 1, W, W] boolean mask with SDPA's
             default choice and with each backend forced; no mask (right only for full rows); SDPA's FLASH
             backend without a mask; torch.nn.attention.varlen over the padded layout with `seqused_k` (the keys
             past each row's length skipped, no packing) and over packed rows (the packing copies counted);
             --varlen-attention's flash call (each row split into its tokens and its padding); and the default
             SDPA and --varlen-attention again with BERT's training dropout of 0.1
  compile    a whole BERT-base training step (forward, loss, backward, fused capturable AdamW) at 32 x W, bf16
             autocast, captured in one CUDA graph and replayed, eager model against `torch.compile(model)` (inductor,
             static shapes), with and without a padding mask; compile seconds reported

Each timing is the median of CUDA-event-timed repetitions after warm-up; each variant's error (unsupported here)
is reported, never fatal. One JSON and a table:

  python bench/gpu_kernels.py --assets .gpu --out /tmp/k.json                 # a GPU machine (~2 minutes)
  python bench/gpu_kernels.py --assets .gpu --out /tmp/k.json --device cpu --small   # CPU dry run of the plumbing
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(fn, device: str, reps: int, warm: int = 3) -> float:
    """Median milliseconds of `fn()` over `reps` runs after `warm` ones (CUDA events on a GPU)."""
    import torch

    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        if device == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        else:
            t = time.perf_counter()
            fn()
            times.append(1000 * (time.perf_counter() - t))
    return statistics.median(times)


def attention_variants(device: str, batch: int, heads: int, width: int, dim: int, lengths: list[int]) -> dict:
    """name -> callable(q, k, v) -> out, for padded [B, H, W, D] inputs whose rows hold `lengths` real tokens."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    lens = torch.tensor(lengths, device=device, dtype=torch.int32)
    keep = torch.arange(width, device=device)[None, :] < lens[:, None]  # [B, W]
    mask4 = keep[:, None, None, :].expand(batch, 1, width, width)  # HF's sdpa mask: [B, 1, Q, K], True = attend
    full = all(n == width for n in lengths)
    out: dict = {}

    def sdpa(mask, backend=None, p=0.0):
        def run(q, k, v):
            if backend is None:
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        return run

    out["sdpa mask (default)"] = sdpa(mask4)
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        out[f"sdpa mask ({name})"] = sdpa(mask4, backend)
    if full:
        out["sdpa no mask (default)"] = sdpa(None)
        out["sdpa no mask (flash)"] = sdpa(None, SDPBackend.FLASH_ATTENTION)
        out["sdpa no mask (cudnn)"] = sdpa(None, SDPBackend.CUDNN_ATTENTION)
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        varlen_attn = None
    if varlen_attn is not None:
        cu_padded = torch.arange(0, (batch + 1) * width, width, device=device, dtype=torch.int32)

        def varlen_seqused(q, k, v):
            # the padded layout as it is: each row a "sequence" of W queries, keys past its length skipped
            flat = [t.transpose(1, 2).reshape(batch * width, heads, dim) for t in (q, k, v)]
            o = varlen_attn(*flat, cu_padded, cu_padded, width, width, seqused_k=lens)
            return o.view(batch, width, heads, dim).transpose(1, 2)

        idx = keep.flatten().nonzero().squeeze(1)
        cu_packed = torch.zeros(batch + 1, device=device, dtype=torch.int32)
        cu_packed[1:] = torch.cumsum(lens, 0)

        def varlen_packed(q, k, v):
            # real tokens only (the pack and the unpack counted): what an unpadded model would run
            flat = [t.transpose(1, 2).reshape(batch * width, heads, dim).index_select(0, idx) for t in (q, k, v)]
            o = varlen_attn(*flat, cu_packed, cu_packed, width, width)
            padded = o.new_zeros(batch * width, heads, dim).index_copy(0, idx, o)
            return padded.view(batch, width, heads, dim).transpose(1, 2)

        out["varlen, padded + seqused_k"] = varlen_seqused
        out["varlen, packed rows"] = varlen_packed
    # --varlen-attention: the flash kernel over the padded layout left in place, each row split into its tokens and
    # its padding (ftcli_trainer.model.varlen_offsets); unlike varlen_attn it trains, with dropout
    from ftcli_trainer.model import _flash, varlen_offsets

    offsets = varlen_offsets(lens, width)

    def ftcli_varlen(p):
        def run(q, k, v):
            flat = [t.transpose(1, 2).reshape(batch * width, heads, dim) for t in (q, k, v)]  # views: [B, W, H, D]
            return _flash(*flat, offsets, width, p, None).view(batch, width, heads, dim).transpose(1, 2)
        return run

    out["ftcli varlen (flash, offsets)"] = ftcli_varlen(0.0)
    # training as BERT does: dropout 0.1 on the probabilities (outputs then differ by design: no error column)
    out[f"sdpa mask (default), {DROPOUT}"] = sdpa(mask4, p=0.1)
    if full:
        out[f"sdpa no mask (default), {DROPOUT}"] = sdpa(None, p=0.1)
    out[f"ftcli varlen, {DROPOUT}"] = ftcli_varlen(0.1)
    return out


DROPOUT = "dropout 0.1"


def bench_attention(args) -> dict:
    import torch

    dev = args.device
    batch, heads, dim = (4, 2, 16) if args.small else (32, 12, 64)
    widths = (64,) if args.small else (512, 320, 128, 32)  # (128, 32: where short texts run)
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32
    results: dict = {}
    for width in widths:
        for kind in ("full rows", "sorted batch"):
            if kind == "full rows":
                lengths = [width] * batch
            else:  # a length-sorted batch: rows from a little under the width up to it
                lengths = [width - (width // 16) + (i * (width // 16)) // batch for i in range(batch)]
                lengths[-1] = width
            key = f"{batch}x{heads}x{width}x{dim}, {kind}"
            flops = 4 * 3.5 * heads * dim * sum(n * n for n in lengths)  # fwd 4·H·D·L², bwd 2.5x fwd, real tokens
            results[key] = {}
            g = torch.Generator(device=dev).manual_seed(0)
            # [B, W, H, D] seen as [B, H, W, D], as a model's projections hand them to attention
            leaves = [torch.randn(batch, width, heads, dim, device=dev, dtype=dtype, generator=g).requires_grad_()
                      for _ in range(3)]
            q, k, v = (t.transpose(1, 2) for t in leaves)
            grad = torch.randn(batch, width, heads, dim, device=dev, dtype=dtype, generator=g).transpose(1, 2)
            keep = (torch.arange(width, device=dev)[None, :] < torch.tensor(lengths, device=dev)[:, None])
            ref = None
            for name, fn in attention_variants(dev, batch, heads, width, dim, lengths).items():
                try:
                    o = fn(q, k, v)
                    real = o.transpose(1, 2)[keep].float()  # [real tokens, H, D]: pads are garbage by design
                    if ref is None:
                        ref = real
                    err = None if DROPOUT in name else (real - ref).abs().max().item()

                    def step(fn=fn, q=q, k=k, v=v, grad=grad, leaves=leaves):
                        for t in leaves:
                            t.grad = None
                        fn(q, k, v).backward(grad)

                    ms = timed(step, dev, args.reps)
                    results[key][name] = {"ms": round(ms, 4), "max_abs_diff_vs_first": err,
                                          "tflops": round(flops / (ms / 1000) / 1e12, 1)}
                except Exception as e:  # noqa: BLE001 - unsupported here: say so, go on
                    results[key][name] = {"error": f"{type(e).__name__}: {str(e).strip().splitlines()[0][:160]}"}
                print(f"attention {key} | {name}: {results[key][name]}", flush=True)
    return results


def bench_compile(args) -> dict:
    """A whole BERT-base step captured in one CUDA graph: eager model against torch.compile(model)."""
    import copy

    import torch
    import torch.nn.functional as F
    from transformers import AutoConfig, AutoModelForSequenceClassification

    dev = args.device
    cfg_dir = Path(args.assets) / "bert-base"
    config = AutoConfig.from_pretrained(cfg_dir, num_labels=2)
    if args.small:
        config.num_hidden_layers, config.hidden_size = 2, 64
        config.intermediate_size, config.num_attention_heads = 128, 2
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    base = AutoModelForSequenceClassification.from_config(config).to(dev)
    batch, width = (4, 64) if args.small else (32, 512)
    cuda = dev == "cuda"
    dtype = torch.bfloat16 if cuda else None
    results: dict = {}
    for padded in (False, True):
        ids = torch.randint(1000, 2000, (batch, width), device=dev)
        mask = torch.ones_like(ids)
        if padded:
            for i in range(batch):
                mask[i, width - (width // 16) + (i * (width // 16)) // batch:] = 0
            mask[-1] = 1
        labels = torch.randint(0, 2, (batch,), device=dev)
        for compiled in (False, True):
            name = f"{'padded mask' if padded else 'full rows, no mask'}, {'compiled' if compiled else 'eager'} model"
            try:
                model = copy.deepcopy(base).train()
                fwd = torch.compile(model, dynamic=False) if compiled else model
                lr = torch.tensor(1e-5, device=dev)
                opt = torch.optim.AdamW(model.parameters(), lr=lr if cuda else 1e-5, fused=cuda, capturable=cuda)
                kwargs = {"input_ids": ids} if not padded else {"input_ids": ids, "attention_mask": mask}

                def step(fwd=fwd, kwargs=kwargs, labels=labels, opt=opt):
                    with torch.autocast(dev, dtype=dtype, enabled=dtype is not None, cache_enabled=False):
                        logits = fwd(**kwargs).logits
                    F.cross_entropy(logits.float(), labels).backward()
                    opt.step()
                    opt.zero_grad(set_to_none=False)

                t0 = time.perf_counter()
                step()  # the compile, if any
                if cuda:
                    torch.cuda.synchronize()
                first_s = time.perf_counter() - t0
                run = step
                if cuda:
                    side = torch.cuda.Stream()
                    side.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(side):
                        for _ in range(3):
                            step()
                    torch.cuda.current_stream().wait_stream(side)
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph):
                        step()
                    run = graph.replay
                ms = timed(run, dev, args.reps)
                n_params = sum(p.numel() for n, p in model.named_parameters() if "embeddings" not in n)
                flops = (6 * n_params * batch * width
                         + 12 * config.num_hidden_layers * config.hidden_size * batch * width ** 2)
                results[name] = {"ms": round(ms, 3), "first_call_s": round(first_s, 1),
                                 "tflops": round(flops / (ms / 1000) / 1e12, 1)}
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                results[name] = {"error": f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}"}
            print(f"compile | {name}: {results[name]}", flush=True)
            if cuda:
                torch.cuda.empty_cache()
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--assets", default=str(ROOT / ".gpu"))
    p.add_argument("--out", default="/tmp/ftcli-gpu-kernels.json")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--small", action="store_true", help="tiny shapes (a CPU dry run)")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--parts", default="attention,compile")
    args = p.parse_args()
    import torch

    out: dict = {"torch": torch.__version__, "device": args.device,
                 "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"}
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    for part, fn in (("attention", bench_attention), ("compile", bench_compile)):
        if part in args.parts.split(","):
            t = time.perf_counter()
            try:
                out[part] = fn(args)
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                out[part] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
            out[f"{part}_seconds"] = round(time.perf_counter() - t, 1)
            Path(args.out).write_text(json.dumps(out, indent=1))  # after each part: a timeout keeps what is done
    print(f"\n## {out['gpu']}, torch {out['torch']}")
    for part in ("attention", "compile"):
        for key, variants in (out.get(part) or {}).items():
            if not isinstance(variants, dict):
                continue
            rows = variants.items() if part == "attention" else [(key, variants)]
            for name, r in rows:
                what = f"{key} | {name}" if part == "attention" else name
                print(f"{part} | {what} | " + (r["error"] if "error" in r else
                                                 f"{r['ms']} ms, {r['tflops']} TFLOP/s"
                                                 + (f", first call {r['first_call_s']} s" if "first_call_s" in r
                                                    else _diff(r.get("max_abs_diff_vs_first")))))


def _diff(d) -> str:
    return "" if d is None else f", max diff {d:.1e}"


if __name__ == "__main__":
    main()
