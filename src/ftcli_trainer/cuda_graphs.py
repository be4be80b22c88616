"""Training steps through fixed-shape buffers, replayed as CUDA graphs on a GPU.

Short-text fine-tuning on a large GPU is bound by kernel launches: a MiniLM step over 32 x 16 tokens is
~15 ms of Python and launches in eager PyTorch and ~2.5 ms as one CUDA graph (docs: shared notes,
gpu-facts.md). A graph replays fixed addresses and shapes, so:

- every batch is padded up to one of a few widths (`bucket_widths`), and a partial batch is filled up with
  rows whose loss weight is 0 (their gradient is exactly 0), so a step is one of a handful of shapes;
- each batch is written into a pinned host slab on the CPU while the GPU runs earlier steps, and copied
  with one non-blocking copy into that width's device buffer, which the graph reads;
- a step is two callables, the same whether they run eagerly or are captured: `micro` (forward, the
  weighted loss, backward into gradients that stay allocated, the loss added to an on-device sum) and
  `update` (clipping folded into the fused AdamW kernel, then the gradients zeroed in place);
- the learning rate is a device tensor in the optimizer's param groups (`arm_optimizer`): the LambdaLR
  scheduler fills it before each replay, so it changes every step without a new capture (fp16: the update fills
  it itself, from a schedule position that an overflowed step does not move: loop.SkippedStepsSchedule);
- dropout draws from the CUDA generator's graph-safe state: each replay advances its offset, so every
  replay gets fresh masks from the same distribution as eager.

The first `warmup` occurrences of each shape run eagerly on a side stream (real training steps, not
extra ones), then the shape is captured on that stream and replayed from then on. Any capture error turns
capture off for the rest of the run, with one log line; the step then runs eagerly. Without `capture`
(a CPU, the tests) the same code runs every step eagerly, which is how the CPU tests check the math.

With `weight_copies` (`--weight-copies`, on by default), the forward reads a bf16 copy of each nn.Linear weight and bias
(`WeightCopies`) instead of autocast casting every one at every step (and casting its gradient back in the
backward): ~150 small cast kernels each way for BERT-base become one fused copy of the gradients into the fp32
`.grad`s before the update and one of the updated weights into the copies after it. The numbers are the same:
autocast would cast those weights to the same bf16 values, the GEMMs and their bf16 gradients are unchanged, and
with one micro-batch a step the fp32 gradient is that bf16 gradient exactly. (A Linear that one forward runs several
times, ALBERT's shared layer, sums its uses' gradients in bf16 either way, autocast's cached cast too, but not
always in the same order: the same to within bf16's rounding there, not bitwise.)

With `unmask_full` (`--unmask-full-batches`, off by default), a micro-batch whose rows all fill its width
(every row cut at --max-length) runs without the attention mask, under its own key `(width, FULL)`: an all-ones
mask changes no number, and HF's eager path drops it too (after looking at its values, which a graph cannot do),
so the attention runs on the kernels without a mask (H200: 1.9 + 2.9 ms a step instead of 2.9 + 4.1 at 32 x 512).

With `shared_casts` (`--shared-casts`, off by default), an fp32 activation that several nn.Linear layers read
in turn (BERT's Q, K and V) is cast to bf16 once (`SharedCasts`), each reader's gradient still cast back on its own:
bit-identical. With `fused_projections` (`--fused-projections`, on by default with the weight copies), each
self-attention module's query, key and value run as one GEMM over their copies laid end to end
(`WeightCopies.fuse_projections`). With `compile_model` (`--compile`, where the run repays it), the model's repeated
blocks (its transformer layers, `CompiledBlocks`) are torch.compile'd inside the forward the graphs capture: one
compile serves every layer and, with dynamic shapes, every width, and each width runs eagerly twice before its
capture so that no compile falls inside one; with the fused projections, the self-attention modules stay out of
the trace. (A model without repeated blocks has its whole forward compiled.)

`prepare` (`--gpu-warmup`) does that warm-up and capture ahead, before the training clock, on filler rows that
change nothing (every row's loss weight is 0, so every gradient is exactly 0; the update runs once at learning
rate 0 and its step counters go back to 0; the generator's state and the loss sum are restored): the first
training steps are then replays, as the steady ones are.
"""

from __future__ import annotations

import bisect
import functools
import logging
import time
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import numpy as np

from ftcli_trainer.errors import first_line

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from types import ModuleType

    import torch
    from transformers import PreTrainedModel

    from ftcli_trainer.data import Encoded

    # A micro-batch's step key (step_key): its padded width, or (width, FULL) when it runs unmasked
    StepKey = int | tuple[int, str]
    # What StaticSteps runs, eagerly or as a graph: a step key's micro-batch, or "update"
    CallKey = StepKey | str

_P = ParamSpec("_P")
_R = TypeVar("_R")

log = logging.getLogger("ftcli_trainer")

# Short texts get narrow widths (SST-2: 72 % of length-bucketed batches fit 16 tokens; below that a replayed
# step costs about the same); past 64 a multiple of 32 wastes at most 31 tokens a row and keeps the
# captures few (each costs about an eager step plus the graph's instantiation).
SMALL_WIDTHS = (16, 32)
WIDTH_STEP = 32
# Eager occurrences of a shape before it is captured, as torch.compile's CUDA-graph trees do: lazy
# initialisation (optimizer state, cuBLAS heuristics, kernels loaded on first use) happens outside the
# capture. One more before the very first capture: the side stream's first use creates its cuBLAS workspace.
WARMUP_STEPS = 1
HOST_SLABS = 3  # pinned host buffers in turn: the CPU runs at most this many micro-batches ahead


def bucket_widths(max_length: int, limit: int | None = None) -> tuple[int, ...]:
    """The padded widths a batch can have: 16, 32, then multiples of 32, and max_length rounded up to 8
    (but never past `limit`, the model's position embeddings)."""
    top = -(-max_length // 8) * 8
    if limit is not None and max_length <= limit < top:
        top = limit
    widths = {w for w in SMALL_WIDTHS if w < top} | set(range(2 * WIDTH_STEP, top, WIDTH_STEP)) | {top}
    return tuple(sorted(widths))


def bucket_for(longest: int, widths: tuple[int, ...]) -> int:
    i = bisect.bisect_left(widths, longest)
    if i == len(widths):
        raise ValueError(f"a row of {longest} tokens is longer than the widest bucket ({widths[-1]})")
    return widths[i]


FULL = "full"  # the key of a width's unmasked graph: (width, FULL)


def key_width(key: StepKey) -> int:
    """The width of a step key: a width, or (width, FULL)."""
    return key[0] if isinstance(key, tuple) else key


def key_order(key: StepKey) -> tuple[int, int]:
    """Widths in order, each one's unmasked key right after it."""
    return (key[0], 1) if isinstance(key, tuple) else (key, 0)


def key_name(key: CallKey) -> str:
    """'16', or '512 unmasked' (or 'update')."""
    return f"{key[0]} unmasked" if isinstance(key, tuple) else str(key)


def step_key(lengths: np.ndarray, rows: int, widths: tuple[int, ...], unmask_full: bool) -> StepKey:
    """The key a micro-batch of rows with `lengths` tokens runs under: its width, or (width, FULL) with
    `unmask_full` when it has all its rows (no filler) and every one fills the width."""
    width = bucket_for(int(lengths.max()), widths)
    if unmask_full and len(lengths) == rows and int(lengths.min()) == width:
        return (width, FULL)
    return width


def decide(mode: str, device_type: str, world_size: int) -> tuple[bool, str]:
    """(use the graph path, why not). `auto` and `on` both use it where it works; `off` never does. A CPU run
    under `auto` is not worth a line: only an explicit `on` is told that it needs a GPU."""
    if mode == "off":
        return False, ""
    if device_type != "cuda":
        return False, "CUDA graphs need a CUDA GPU" if mode == "on" else ""
    if world_size > 1:
        return False, f"DDP over {world_size} processes is not captured (its gradient hooks run per bucket)"
    # (fp16 too, with its loss scaler captured, as fused AdamW takes GradScaler's found_inf and skips a step on the
    # device (StaticSteps' `scaler`): on an H100, 2026-11-28, MiniLM SST-2 in fp16 trained 11.4x eager's samples/s,
    # 1.55x sooner end to end, accuracy 0.874 against 0.873; the GPU test of skipped and rescaled steps passed)
    return True, ""


@dataclass(frozen=True)
class Layout:
    """Where each input lives in one int64 block (one host-to-device copy a micro-batch)."""

    rows: int
    width: int
    pairs: bool
    n_labels: int  # 0: single-label (one int label a row); else multi-label 0/1 columns
    # One float target a row, stored as its float64's bits (as the loss scale is): the block stays one int64
    # copy, and float32 -> float64 -> float32 gives the eager path's target exactly.
    regression: bool = False

    @property
    def _area(self) -> int:
        return self.rows * self.width

    @property
    def ids(self) -> slice:
        return slice(0, self._area)

    @property
    def mask(self) -> slice:
        return slice(self._area, 2 * self._area)

    @property
    def types(self) -> slice | None:
        return slice(2 * self._area, 3 * self._area) if self.pairs else None

    @property
    def labels(self) -> slice:
        start = (3 if self.pairs else 2) * self._area
        return slice(start, start + self.rows * max(1, self.n_labels))

    @property
    def weight(self) -> slice:
        start = self.labels.stop
        return slice(start, start + self.rows)

    @property
    def scale(self) -> int:
        return self.weight.stop

    @property
    def size(self) -> int:
        return self.scale + 1


def fill_block(block: np.ndarray, layout: Layout, enc: Encoded, idx: np.ndarray, pad_id: int, scale: float) -> int:
    """Write one micro-batch into `block` (int64, `layout.size`): token ids padded with `pad_id`, the
    attention mask, token types, labels, a 0/1 loss weight per row and the loss scale (a float64's bits).
    Rows past the batch are filler, of loss weight 0: copies of the batch's first row (in a batch of filler only,
    as `prepare` loads, of the data's shortest row, which fits every width the run's batches use), so that what a
    model checks of its inputs holds for them as for real rows (BART's classification head asks every row for
    the same number of <eos> tokens: rows of padding had none, and the run stopped), and each attends to a token
    (a fully masked row would make SDPA's softmax NaN, and 0 x NaN is NaN). Returns the tokens the step computes
    on (rows x width)."""
    rows, width = layout.rows, layout.width
    k = len(idx)
    if k > rows:
        raise ValueError(f"{k} rows do not fit a buffer of {rows}")
    if k:
        template = idx[:1]
    else:  # (prepare's only: every row's length is read here, never for a training batch)
        lengths_all = np.diff(enc.offsets)
        template = np.argmin(lengths_all, keepdims=True) if len(lengths_all) else idx
    every = np.concatenate([idx, np.repeat(template, rows - k)]).astype(np.int64)
    n = len(every)  # every row but where the data has no row at all: filler of padding then
    starts = enc.offsets[every]
    lengths = enc.offsets[every + 1] - starts
    cols = np.arange(width)
    real = cols[None, :] < lengths[:, None]
    gather = np.minimum(starts[:, None] + cols[None, :], max(0, len(enc.ids) - 1))
    ids = block[layout.ids].reshape(rows, width)
    ids[:n] = np.where(real, enc.ids[gather], pad_id)
    ids[n:] = pad_id
    mask = block[layout.mask].reshape(rows, width)
    mask[:n] = real
    mask[n:] = 0
    mask[k:, 0] = 1  # (a filler row cut at 0 tokens, or of padding: one attended token all the same)
    if layout.types is not None:
        types = block[layout.types].reshape(rows, width)
        # (a layout has token types only for data that has them: StaticSteps' `pairs`)
        types[:n] = np.where(real, enc.type_ids[gather], 0)  # type: ignore[index]
        types[n:] = 0
    labels = block[layout.labels].reshape(rows, -1)
    if layout.regression:
        labels[:k, 0] = enc.labels[idx].astype(np.float64).view(np.int64)
    else:
        labels[:k] = enc.labels[idx].reshape(k, labels.shape[1])  # k is 0 in a batch of filler (prepare)
    labels[k:] = 0  # float64 0.0 has the bits of int 0
    weight = block[layout.weight]
    weight[:k] = 1
    weight[k:] = 0
    block[layout.scale] = np.float64(scale).view(np.int64)
    return rows * width


def weighted_loss_sum(logits: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor, multi_label: bool,
                      regression: bool = False) -> torch.Tensor:
    """`loop.loss_sum` with a 0/1 weight per row: filler rows add exactly 0 to the loss and its gradient."""
    import torch
    import torch.nn.functional as F

    logits = logits.float()
    if regression:
        # Selected, not multiplied: a filler row's squared error is unbounded, and an overflow times 0 is NaN.
        per_row = F.mse_loss(logits.squeeze(-1), labels, reduction="none")
        return torch.where(weight > 0, per_row, 0.0).sum()
    if multi_label:
        per_row = F.binary_cross_entropy_with_logits(logits, labels, reduction="none").sum(-1)
        return (per_row * weight).sum() / logits.shape[-1]
    return (F.cross_entropy(logits, labels, reduction="none") * weight).sum()


def arm_optimizer(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """Learning rates as device tensors (the scheduler then fills them in place), capturable AdamW."""
    import torch

    for group in optimizer.param_groups:
        if not isinstance(group["lr"], torch.Tensor):
            group["lr"] = torch.tensor(float(group["lr"]), dtype=torch.float32, device=device)
        group["capturable"] = True


def plain_optimizer_state(state: dict) -> dict:
    """An optimizer state_dict as the eager path writes it (float lr, not capturable), so a checkpoint
    resumes either way. Reads a device lr: a host sync, at checkpoints only."""
    import torch

    groups = []
    for g in state["param_groups"]:
        g = dict(g)
        if isinstance(g.get("lr"), torch.Tensor):
            g["lr"] = float(g["lr"])
            g["capturable"] = False
        groups.append(g)
    return {**state, "param_groups": groups}


def plain_scheduler_state(state: dict) -> dict:
    import torch

    return {k: ([float(x) if isinstance(x, torch.Tensor) else x for x in v] if k in ("_last_lr", "base_lrs") else v)
            for k, v in state.items()}


class WeightCopies:
    """bf16 (or fp16) copies of the model's nn.Linear weights and biases for the forward pass, kept equal to the
    fp32 weights (the optimizer's, the checkpoint's and the export's) by one fused copy after each update.

    Only nn.Linear parameters: autocast casts them for every matmul anyway, so reading a copy changes no number.
    Not the others (embeddings, whose fp32 sums feed a LayerNorm; norms, which autocast runs in fp32), nor a
    parameter that two modules share (a tied weight would be swapped everywhere it is used)."""

    def __init__(self, model: torch.nn.Module, dtype: torch.dtype) -> None:
        import torch

        self.torch = torch
        self.model = model
        shared: dict[int, int] = {}  # id(param) -> how many modules hold it
        for _, param in model.named_parameters(remove_duplicate=False):
            shared[id(param)] = shared.get(id(param), 0) + 1
        self.params: dict = {}
        for module_name, module in model.named_modules():
            if isinstance(module, torch.nn.Linear):
                for name, param in module.named_parameters(recurse=False):
                    if param.requires_grad and param.dtype == torch.float32 and shared[id(param)] == 1:
                        self.params[f"{module_name}.{name}" if module_name else name] = param
        self._ids = {id(p) for p in self.params.values()}
        with torch.no_grad():
            self.copies = {name: p.detach().to(dtype).requires_grad_(True) for name, p in self.params.items()}
        self._targets = [c.detach() for c in self.copies.values()]  # written in place, outside autograd
        self._sources = list(self.params.values())
        self.grads: list | None = None  # the copies' gradients, from the first update on
        self._param_grads: list = []
        self.proven = False  # a forward on them has run (StaticSteps turns them off if the first one fails)
        self.fused: list[FusedProjections] = []  # fuse_projections'
        self._fused_slices: dict = {}  # a fused copy's name -> (its group's leaf, first row, end row)

    def __contains__(self, param: object) -> bool:
        return id(param) in self._ids

    def __len__(self) -> int:
        return len(self.params)

    def forward(self, inputs: dict[str, torch.Tensor]) -> Any:
        """The model's forward on the copies; its output (a transformers ModelOutput) as the model returns it."""
        with ExitStack() as stack:
            for group in self.fused:
                stack.enter_context(group.active())
            return self.torch.func.functional_call(self.model, self.copies, args=(), kwargs=inputs, strict=False)

    def fuse_projections(self) -> int:
        """--fused-projections (on an H100, 7 % shorter steps at 512 tokens): each self-attention module's query,
        key and value projections (`qkv_names`) become one GEMM over one bf16 copy of their three weights (and
        biases) laid end to end, its output split three ways, so a step runs one GEMM instead of three forward,
        one instead of three for the input's gradient (and the two sums of theirs) and one for the weights'. The
        same dot products; the fp32 weights, the optimizer and the export see three Linears as before. Returns how
        many modules it fused (a cross-attention among them runs unfused once `find_inputs` has found it out)."""
        torch = self.torch
        for module_name, module in self.model.named_modules():
            trio = qkv_names(module)
            if trio is None:
                continue
            linears = [getattr(module, n) for n in trio]
            prefix = f"{module_name}." if module_name else ""
            weights = [f"{prefix}{n}.weight" for n in trio]
            with_bias = {lin.bias is not None for lin in linears}
            biases = [f"{prefix}{n}.bias" for n in trio] if with_bias == {True} else []
            if (len({lin.in_features for lin in linears}) != 1 or len(with_bias) != 1
                    or not all(n in self.copies for n in weights + biases)):
                continue  # a projection left out of the copies (frozen, shared) or of another shape: as it is
            sizes = [lin.out_features for lin in linears]
            with torch.no_grad():
                leaves = [torch.cat([self.copies[n] for n in names]).requires_grad_(True)
                          for names in (weights, biases) if names]
            for names, leaf in zip((weights, biases), leaves, strict=False):
                start = 0
                for name, size in zip(names, sizes, strict=True):
                    self.copies[name] = leaf.detach()[start:start + size]  # refresh() writes into the leaf
                    self._fused_slices[name] = (leaf, start, start + size)
                    start += size
            self.fused.append(FusedProjections(torch, linears, leaves[0], leaves[1] if biases else None, sizes))
        self._targets = [c.detach() for c in self.copies.values()]
        return len(self.fused)

    def find_inputs(self, inputs: dict[str, torch.Tensor]) -> None:
        """Which fused modules read one input (FusedProjections.one_input): one forward without gradients, before
        the first training forward (eager, never captured), so that every step runs the projections one way. The
        caller restores the generator's state (dropout)."""
        if any(group.one_input is None for group in self.fused):
            with self.torch.no_grad():
                self.forward(inputs)

    def _grad(self, name: str) -> torch.Tensor | None:
        """The gradient of the copy `name` after a backward (None: it got none): a fused copy's is its rows of
        its group's gradient."""
        if name in self._fused_slices:
            leaf, start, end = self._fused_slices[name]
            return None if leaf.grad is None else leaf.grad[start:end]
        return self.copies[name].grad

    def grads_to_params(self) -> None:
        """The copies' gradients into the fp32 weights' `.grad` (exact: bf16 values widen to fp32 unchanged). On
        the first call, which is eager, the fp32 gradients are made, for the weights that got one (an unused
        weight keeps None, so AdamW skips it as on the eager path)."""
        if self.grads is None:
            used = [(g, p) for n, p in self.params.items() if (g := self._grad(n)) is not None]
            for _, p in used:
                p.grad = self.torch.zeros_like(p)
            self.grads = [g for g, _ in used]
            self._param_grads = [p.grad for _, p in used]
        if self.grads:
            self.torch._foreach_copy_(self._param_grads, self.grads)

    def refresh(self) -> None:
        """The updated fp32 weights into the copies (round to nearest even, as autocast's cast)."""
        self.torch._foreach_copy_(self._targets, self._sources)


class FusedProjections:
    """One module's query, key and value projections as one GEMM (`WeightCopies.fuse_projections`): while
    `active`, each of the three nn.Linear runs `project`, which computes the fused product once for the input
    they share and hands each its part (a view: no copy).

    Only where the three read one input: a cross-attention (BART's decoder `encoder_attn`, named q_proj, k_proj and
    v_proj as its self-attentions are) projects its queries from the decoder's states and its keys and values from
    the encoder's, and the fused GEMM would run twice, at three times the width, for one part each time (BART-large:
    ~10 % more GEMM work a step, counted from its shapes). A forward that trains nothing finds that out before the
    first step's (`WeightCopies.find_inputs`); a module found reading two inputs runs its three projections on their
    own rows of the fused copy (`one_input` False): the GEMMs the model runs without the fusion."""

    _x: torch.Tensor | None  # the input of the current fused product (declared here: __init__'s `torch` is the module)

    def __init__(self, torch: ModuleType, linears: list[torch.nn.Linear], weight: torch.Tensor,
                 bias: torch.Tensor | None, sizes: list[int]) -> None:
        self.torch = torch
        self.linears = linears
        self.weight, self.bias, self.sizes = weight, bias, sizes
        ends = np.cumsum(sizes).tolist()
        self.rows = list(zip([0, *ends[:-1]], ends, strict=True))  # each projection's rows of the fused copy
        self.one_input: bool | None = None  # None until a forward has run it
        self._x = None
        self._parts: tuple = ()
        self._served: set[int] = set()  # the parts handed out of the current fused product

    def project(self, i: int, x: torch.Tensor) -> torch.Tensor:
        if self.one_input is False:  # (reads two inputs: each projection on its own rows, as unfused)
            start, end = self.rows[i]
            return self.torch.nn.functional.linear(x, self.weight[start:end],
                                                   None if self.bias is None else self.bias[start:end])
        if self._x is not x:
            self._learn()
            self._x = x
            self._parts = self.torch.nn.functional.linear(x, self.weight, self.bias).split(self.sizes, dim=-1)
        self._served.add(i)
        return self._parts[i]

    def _learn(self) -> None:
        """In the first forward that runs this module: a fused product of which a part went unused means that the
        three projections read more than one input."""
        if self.one_input is None and self._x is not None and len(self._served) < len(self.linears):
            self.one_input = False
        self._served = set()

    @contextmanager
    def active(self) -> Iterator[None]:
        for i, lin in enumerate(self.linears):
            # (an instance attribute, which nn.Module's call runs as the forward, over the class's method)
            lin.forward = functools.partial(self.project, i)  # type: ignore[method-assign]
        try:
            yield
        finally:
            for lin in self.linears:
                del lin.forward
            ran = self._x is not None or self.one_input is False
            self._learn()
            if ran and self.one_input is None:
                self.one_input = True
            self._x, self._parts = None, ()  # no activation held between forwards


def repeated_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's repeated blocks (a transformer's layers): of its nn.ModuleLists of two or more modules of one
    class, the one holding the most parameters; [] when it has none."""
    import torch

    best: list = []
    most = 0
    for mod in model.modules():
        if isinstance(mod, torch.nn.ModuleList) and len(mod) >= 2 and len({type(b) for b in mod}) == 1:
            n = sum(p.numel() for p in mod.parameters())
            if n > most:
                best, most = list(mod), n
    return best


# The names of a self-attention module's query, key and value projections: BERT and its kin, most decoders, DistilBERT
QKV_NAMES = (("query", "key", "value"), ("q_proj", "k_proj", "v_proj"), ("q_lin", "k_lin", "v_lin"))


def qkv_names(module: torch.nn.Module) -> tuple[str, str, str] | None:
    """The names of `module`'s query, key and value nn.Linear children (QKV_NAMES), or None: it is no
    self-attention module."""
    import torch

    return next((trio for trio in QKV_NAMES
                 if all(isinstance(getattr(module, n, None), torch.nn.Linear) for n in trio)), None)


def attention_modules(block: torch.nn.Module) -> list[torch.nn.Module]:
    """The modules inside `block` that compute its self-attention from the hidden states: those with query, key
    and value nn.Linear children."""
    return [m for m in block.modules() if qkv_names(m) is not None]


def compile_dynamic(torch: ModuleType, fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """torch.compile(fn, dynamic=True), traced without "duck sizing": dynamo would otherwise take two sizes that
    happen to be equal at the first width for one symbol (BERT-base's 64-wide heads at width 64) and compile again
    at the next width."""
    compiled = torch.compile(fn, dynamic=True)
    try:
        import torch.fx.experimental._config as fx_config

        # patch is set on the module at import time by torch's install_config_module; unlike _dynamo.config and
        # _inductor.config, fx.experimental._config does not declare it for type checkers (torch/utils/
        # _config_typing.pyi under TYPE_CHECKING), so mypy sees no such attribute (torch 2.13, read 2026-11-29).
        sizes: Callable[[], AbstractContextManager[object]] = functools.partial(
            fx_config.patch, use_duck_shape=False)  # type: ignore[attr-defined]
    except (ImportError, AttributeError):
        sizes = nullcontext

    @functools.wraps(fn)
    def call(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with sizes():
            return compiled(*args, **kwargs)
    return call


class CompiledBlocks:
    """torch.compile'd repeated blocks: one compile of their class's forward serves all of them (they run the same
    code; their weights are its inputs, not constants) and, with dynamic shapes, every width. This is regional
    compilation: the fusions a whole-model compile makes happen inside the layers, and compiling one layer's
    code instead of twelve copies of it took 23 s instead of 108 s for BERT-base on this project's 2-core CPU
    machine (forward and backward, widths 32-96).

    The compiled forwards are switched on only around the training forward (`active`): the backward that
    compile made stays in the autograd graph, and evaluation (eval mode, inference mode) and the exported model
    run the plain blocks, with no second compile for them."""

    def __init__(self, torch: ModuleType, blocks: list[torch.nn.Module], eager_attention: bool = False) -> None:
        self.blocks = blocks
        self.fn = compile_dynamic(torch, type(blocks[0]).forward)
        # eager_attention (with the fused projections, StaticSteps): each block's self-attention module (its query,
        # key and value projections, the attention, the heads merged) runs as it is, outside the trace. The layers
        # then break before the projections instead of at the attention call, where inductor writes the query, key
        # and value out in the heads-first layout the call was traced with (a copy each, and a second one where the
        # flash call wants them tokens-first); what there is to fuse lies after the attention.
        self.eager = [(m, torch.compiler.disable(functools.partial(type(m).forward, m)))
                      for block in blocks for m in attention_modules(block)] if eager_attention else []

    def __len__(self) -> int:
        return len(self.blocks)

    @contextmanager
    def active(self) -> Iterator[None]:
        for block in self.blocks:  # an instance attribute: nn.Module's call runs it as the forward
            block.forward = functools.partial(self.fn, block)
        for module, eager in self.eager:
            module.forward = eager
        try:
            yield
        finally:
            for block in self.blocks:
                del block.forward
            for module, _ in self.eager:
                del module.forward


@functools.cache
def _shared_cast_fn() -> type[torch.autograd.Function]:
    """An autograd function whose forward hands on an already-made cast of `x` and whose backward casts the
    incoming gradient back to fp32: what autocast's own cast of `x` would do, once per reader."""
    import torch

    class SharedCast(torch.autograd.Function):
        # (ctx: torch's context object, on which the forward leaves what the backward needs; FunctionCtx declares
        # no such attribute)
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor, cast: torch.Tensor) -> torch.Tensor:
            ctx.dtype = x.dtype
            return cast.view_as(cast)

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
            return grad.to(ctx.dtype), None

    return SharedCast


class SharedCasts:
    """One autocast cast of an fp32 activation that several nn.Linear layers read in turn, instead of one each.

    Under autocast, a LayerNorm's output is fp32 and each Linear that reads it casts it to bf16 on its own:
    BERT's query, key and value project the same tensor, so it is cast three times (a read of 4 and a write of
    2 bytes per element each: at 32 x 512 x 768 ~75 MB, per layer per step). A forward pre-hook on every
    nn.Linear casts an fp32 input once and hands the same bf16 values to the next Linear that reads the same
    tensor. The numbers are autocast's: the same cast, the same GEMM operands, and each reader's gradient cast
    back to fp32 on its own and summed in fp32, as autocast's per-reader casts are."""

    def __init__(self, model: torch.nn.Module, dtype: torch.dtype) -> None:
        import torch

        self.torch = torch
        self.dtype = dtype
        # (the fp32 tensor, its cast): the previous Linear's input
        self.last: tuple[torch.Tensor, torch.Tensor] | None = None
        self.made = self.reused = 0
        for m in model.modules():
            if isinstance(m, torch.nn.Linear):
                m.register_forward_pre_hook(self._hook)

    def _hook(self, module: torch.nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        torch = self.torch
        x = args[0] if args else None
        if not (isinstance(x, torch.Tensor) and x.dtype == torch.float32 and torch.is_autocast_enabled(x.device.type)):
            return None
        last = self.last
        if last is None or last[0] is not x:
            last = self.last = (x, x.detach().to(self.dtype))
            self.made += 1
        else:
            self.reused += 1
        return (_shared_cast_fn().apply(x, last[1]), *args[1:])

    def forget(self) -> None:
        """After a forward: no activation is held until the next one."""
        self.last = None


class StaticSteps:
    """One optimizer step = `run(group, scale)`: micro-batches through fixed-shape buffers, then the update.

    `clip_and_step` is the trainer's own, free of host syncs for fused AdamW, also with fp16's loss scaler:
    GradScaler hands fused AdamW its on-device found_inf, and the kernel skips an overflowed step itself (unscale_,
    the gradient norm, step and update are all device work). `scaler` is that GradScaler (fp16), whose scale the
    backward multiplies in as the eager path's `scaler.scale` does. `loss_acc` is the trainer's on-device loss sum
    (a graph adds to it in place, so it must never be replaced)."""

    def __init__(self, *, model: PreTrainedModel, optimizer: torch.optim.Optimizer, clip_and_step: Callable[[], None],
                 enc: Encoded, pad_id: int, rows: int, max_length: int, multi_label: bool, n_labels: int,
                 device: torch.device, autocast_dtype: torch.dtype | None, loss_acc: torch.Tensor, capture: bool,
                 warmup: int = WARMUP_STEPS, regression: bool = False, weight_copies: bool = False,
                 unmask_full: bool = False, shared_casts: bool = False, compile_model: bool = False,
                 eager_attention: bool = False, fused_projections: bool = False,
                 scaler: torch.amp.GradScaler | None = None) -> None:
        import torch

        self.torch = torch
        self.model = model
        self.optimizer = optimizer
        self.clip_and_step = clip_and_step
        self.scaler = scaler if scaler is not None and scaler.is_enabled() else None
        self.enc = enc
        self.pad_id = pad_id
        self.rows = rows
        self.widths = bucket_widths(max_length, getattr(model.config, "max_position_embeddings", None))
        self.multi_label = multi_label
        self.regression = regression
        self.device = device
        self.autocast_dtype = autocast_dtype
        self.loss_acc = loss_acc
        self.capture = capture
        # With compile_model, the model's layers are torch.compile'd inside the forward the graphs capture
        # (CompiledBlocks, dynamic shapes: one compile for every layer and width). The compile, and inductor's lazy
        # first calls at a new width, must never fall inside a capture: each width runs eagerly twice first (the
        # very first call is the weight copies' proving one).
        self.compile_model = compile_model
        self.eager_attention = eager_attention  # CompiledBlocks': the self-attention modules left out of the trace
        self.compiled: CompiledBlocks | Callable[[dict], Any] | None = None
        self.warmup = max(warmup, 2) if compile_model else warmup
        # The gradients that the first (eager) backward creates stay allocated, outside any graph's pool:
        # later backwards add into them, and the update zeroes them in place. A parameter that gets none
        # (unused by the model) keeps None, so AdamW skips it as on the eager path.
        self.grads: list | None = None
        # (The trainer asks for copies only with one micro-batch a step, where the bf16 gradient is fp32's exactly.)
        self.copies = WeightCopies(model, autocast_dtype) if weight_copies and autocast_dtype is not None else None
        # fused_projections: on the weight copies, outside a trace (its per-input cache is Python's). With the
        # layers compiled, their self-attention modules are then left out of the trace: measured together on an
        # H100 (2026-11-28, 32 x 512, --unmask-full-batches), 34.2 ms a step against 36.3 with the three
        # projections traced, while leaving the modules out without fusing cost 1.4 ms
        fused = self.copies.fuse_projections() if fused_projections and self.copies is not None else 0
        if fused and compile_model:
            self.eager_attention = True
        # (compiled, the casts are inductor's to fuse: its trace would not see the hooks' Python-side cache; fused,
        # the fused projection casts its input once itself)
        self.shared_casts = (SharedCasts(model, autocast_dtype) if shared_casts and autocast_dtype is not None
                             and not compile_model and not fused else None)
        arm_optimizer(optimizer, device)
        self.lr_tensors = [g["lr"] for g in optimizer.param_groups]
        pairs = enc.type_ids is not None
        self.layouts = {w: Layout(rows, w, pairs, n_labels if multi_label else 0, regression) for w in self.widths}
        biggest = max(lay.size for lay in self.layouts.values())
        pin = device.type == "cuda"
        self.slabs = [torch.empty(biggest, dtype=torch.int64, pin_memory=pin) for _ in range(HOST_SLABS)]
        self.slab_events: list[Any] = [None] * HOST_SLABS  # a slab's last copy (torch.cuda.Event), once made
        self.next_slab = 0
        self.buffers = {w: torch.zeros(lay.size, dtype=torch.int64, device=device) for w, lay in self.layouts.items()}
        self.unmask_full = unmask_full
        self.calls: dict[CallKey, Callable[[], None]] = {w: self._micro_fn(w) for w in self.widths}  # by step key
        if unmask_full:
            self.calls.update({(w, FULL): self._micro_fn(w, masked=False) for w in self.widths})
        self.calls["update"] = self._update
        self.graphs: dict[CallKey, torch.cuda.CUDAGraph] = {}
        self.seen: dict[CallKey, int] = {}  # the calls of each key made so far (its warm-up)
        self.counts = {"captured": 0, "replays": 0, "eager": 0, "warmup": 0}  # warmup: prepare's filler calls
        self.capture_seconds = 0.0
        self.prepare_seconds = 0.0
        self._pool: tuple[int, int] | None = None
        self._side: torch.cuda.Stream | None = None

    @property
    def fused(self) -> int:
        """How many self-attention modules run their query, key and value as one GEMM (none once the weight
        copies are off; a module found reading two inputs, a cross-attention, is not one)."""
        return sum(g.one_input is not False for g in self.copies.fused) if self.copies is not None else 0

    @property
    def side(self) -> torch.cuda.Stream:
        if self._side is None:
            self._side = self.torch.cuda.Stream(self.device)
        return self._side

    @property
    def pool(self) -> tuple[int, int]:
        if self._pool is None:
            self._pool = self.torch.cuda.graph_pool_handle()
        return self._pool

    # -- the two callables a step is made of (identical eager or captured) --------------------------

    def _micro_fn(self, width: int, masked: bool = True) -> Callable[[], None]:
        torch = self.torch
        lay = self.layouts[width]
        buf = self.buffers[width]
        inputs = {"input_ids": buf[lay.ids].view(lay.rows, width)}
        if masked:  # (unmasked: every row fills the width, see step_key)
            inputs["attention_mask"] = buf[lay.mask].view(lay.rows, width)
        if lay.types is not None:
            inputs["token_type_ids"] = buf[lay.types].view(lay.rows, width)
        if lay.regression:
            labels = buf[lay.labels].view(torch.float64)
        elif lay.n_labels:
            labels = buf[lay.labels].view(lay.rows, -1)
        else:
            labels = buf[lay.labels]
        weight = buf[lay.weight]
        scale = buf[lay.scale:lay.scale + 1].view(torch.float64)

        def micro() -> None:
            # No weight-cast cache under autocast: a cache filled inside a capture would be replayed stale.
            ctx = (nullcontext() if self.autocast_dtype is None
                   else torch.autocast(self.device.type, dtype=self.autocast_dtype, cache_enabled=False))
            with ctx:
                logits = self._forward(inputs).logits
            if self.shared_casts is not None:
                self.shared_casts.forget()
            y = labels.float() if lay.n_labels or lay.regression else labels
            loss = weighted_loss_sum(logits, y, weight.float(), self.multi_label, self.regression)
            # The scale in float32, as eager's `loss * python_float` multiplies; then fp16's loss scale, read from
            # its device tensor at every replay.
            scaled = loss * scale.float().squeeze(0)
            (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
            self.loss_acc.add_(loss.detach())

        return micro

    def _forward(self, inputs: dict[str, torch.Tensor]) -> Any:
        if self.copies is None or self.copies.proven:
            return self._model_call(inputs)
        rng = _rng_state(self.torch, self.device)  # a failed forward may have drawn dropout masks: draw them again
        try:  # the first call, always eager: a model that runs a Linear outside autocast fails here, on bf16
            out = self._first_copies_forward(inputs, rng)
        except Exception as e:  # (any class: a model may check its weights' dtype itself, a ValueError)
            _set_rng_state(self.torch, self.device, rng)
            out = self.model(**inputs)  # a failure of the model's own (not of the copies) is raised from here, as is
            log.warning("--weight-copies off%s: this model's forward fails on %s copies of its Linear weights "
                        "(%s: %s); autocast casts them at each step instead",
                        " (and with them --fused-projections)" if self.copies.fused else "",
                        "fp16" if self.autocast_dtype == self.torch.float16 else "bf16", type(e).__name__,
                        first_line(e))
            self.copies = None
            return out
        self.copies.proven = True
        return out

    def _first_copies_forward(self, inputs: dict[str, torch.Tensor], rng: torch.Tensor) -> Any:
        """The first forward on the weight copies: which fused modules read one input found first (find_inputs),
        and, where the fused product fails the model, once more with each projection on its own rows."""
        copies = self.copies
        assert copies is not None
        try:
            if copies.fused:
                copies.find_inputs(inputs)
                _set_rng_state(self.torch, self.device, rng)
            return copies.forward(inputs)
        except Exception as e:
            fused = [group for group in copies.fused if group.one_input is not False]
            if not fused:
                raise
            # The fused product split three ways: autograd refuses a model that modifies a projection in place
            # (Longformer's `query_vectors /=`) on split()'s views. Each projection then runs on its own rows of the
            # fused copy, the copies kept. (Not slices for every model: a slice's backward writes a zero-filled
            # gradient of the whole width for each part, where split()'s is one cat.)
            _set_rng_state(self.torch, self.device, rng)
            for group in fused:
                group.one_input = False
            out = copies.forward(inputs)
            log.info("--fused-projections off: this model's forward fails on the parts of the fused product (%s: %s); "
                     "query, key and value run as three GEMMs", type(e).__name__,
                     first_line(e))
            return out

    def _model_call(self, inputs: dict[str, torch.Tensor]) -> Any:
        """The model's forward: on the weight copies when they are on; with compile_model, through its compiled
        blocks (or, for a model without repeated blocks, compiled whole)."""
        copies = self.copies
        model = self.model
        fn = copies.forward if copies is not None else (lambda inputs: model(**inputs))
        if not self.compile_model:
            return fn(inputs)
        if self.compiled is None:
            blocks = repeated_blocks(model)
            if blocks:  # the layers break at SDPA, as at --varlen-attention's call: traced, its capture failed
                from ftcli_trainer.model import keep_attention_out_of_compile

                keep_attention_out_of_compile(model)
            self.compiled = (CompiledBlocks(self.torch, blocks, self.eager_attention) if blocks
                             else compile_dynamic(self.torch, fn))
        if isinstance(self.compiled, CompiledBlocks):
            with self.compiled.active():
                return fn(inputs)
        return self.compiled(inputs)

    def _update(self) -> None:
        copies = self.copies
        if copies is not None:
            copies.grads_to_params()
        self.clip_and_step()
        if self.grads is None:
            # (the copied weights' fp32 gradients are overwritten by the next step's copy: no need to zero them)
            own: list = []
            if copies is not None:
                assert copies.grads is not None  # set by grads_to_params above
                own = copies.grads
            self.grads = [p.grad for p in self.model.parameters()
                          if p.grad is not None and (copies is None or p not in copies)] + own
        self.torch._foreach_zero_(self.grads)
        if copies is not None:
            copies.refresh()

    def keep_lr_on_device(self) -> None:
        """After scheduler.step(): torch's schedulers fill a tensor lr in place (torch >= 2.4); one that
        assigned a float instead would leave the graphs reading a stale rate, so copy it back in."""
        for group, lr in zip(self.optimizer.param_groups, self.lr_tensors, strict=True):
            if group["lr"] is not lr:
                lr.fill_(float(group["lr"]))
                group["lr"] = lr

    # -- running them --------------------------------------------------------------------------------

    def run(self, group: list[np.ndarray], scale: float) -> int:
        """One optimizer step over `group`'s micro-batches; returns the tokens computed on (with padding)."""
        computed = 0
        for idx in group:
            key = step_key(self.enc.offsets[idx + 1] - self.enc.offsets[idx], self.rows, self.widths, self.unmask_full)
            computed += self._load(key_width(key), idx, scale)
            self._call(key)
        self._call("update")
        return computed

    def _load(self, width: int, idx: np.ndarray, scale: float) -> int:
        lay = self.layouts[width]
        i = self.next_slab
        self.next_slab = (i + 1) % len(self.slabs)
        if self.slab_events[i] is not None:
            self.slab_events[i].synchronize()  # its last copy is done: the CPU may overwrite the slab
        slab = self.slabs[i][:lay.size]
        n = fill_block(slab.numpy(), lay, self.enc, idx, self.pad_id, scale)
        self.buffers[width].copy_(slab, non_blocking=True)
        if self.device.type == "cuda":
            ev = self.slab_events[i] or self.torch.cuda.Event()
            ev.record()
            self.slab_events[i] = ev
        return n

    def _call(self, key: CallKey) -> None:
        graph = self.graphs.get(key)
        if graph is not None:
            graph.replay()
            self.counts["replays"] += 1
            return
        fn = self.calls[key]
        if not self.capture:
            self._eager(fn)
            return
        seen = self.seen.get(key, 0)
        self.seen[key] = seen + 1
        if seen < self.warmup + (0 if self.graphs else 1):
            self._on_side_stream(fn)
            return
        graph = self._try_capture(key)
        if graph is None:
            self._eager(fn)
            return
        graph.replay()
        self.counts["replays"] += 1

    def _try_capture(self, key: CallKey, when: str = "") -> torch.cuda.CUDAGraph | None:
        """Capture `key`'s callable; on any error, capture goes off for the rest of the run with one line."""
        started = time.perf_counter()
        try:
            graph = self._capture(self.calls[key])
        except Exception as e:  # noqa: BLE001 - never crash a run because of the fast path
            self.capture = False
            # Every step eager from here on, the graphs captured so far too: their replays would draw dropout from
            # the generator state that the failed capture left behind (_capture), the eager steps from another.
            self.graphs.clear()
            if self.scaler is not None:
                # A capture that failed inside the update can leave GradScaler's Python side mid-step (unscale_
                # recorded, no update()), and its next unscale_ would refuse: forget that step's records, as
                # update() does. The scale and growth tracker are tensors the failed capture never ran on.
                records = getattr(self.scaler, "_per_optimizer_states", None)  # (private; torch 2.7-2.13 have it)
                if records is not None:
                    records.clear()
            log.warning("CUDA graphs: capturing %s%s failed (%s: %s); eager steps from here on",
                        f"width {key_name(key)}" if key != "update" else "the update", when, type(e).__name__,
                        first_line(e))
            return None
        self.capture_seconds += time.perf_counter() - started
        self.graphs[key] = graph
        self.counts["captured"] += 1
        return graph

    def _eager(self, fn: Callable[[], None], count: str = "eager") -> None:
        with warnings.catch_warnings():
            # capturable AdamW warns when it steps outside a capture: expected here, same math.
            warnings.filterwarnings("ignore", message=".*capturable=True.*")
            fn()
        self.counts[count] += 1

    def _on_side_stream(self, fn: Callable[[], None], count: str = "eager") -> None:
        # Warm-up on the stream the capture will use, so lazily created per-stream state (cuBLAS
        # workspaces) exists before capture begins.
        torch = self.torch
        main = torch.cuda.current_stream(self.device)
        self.side.wait_stream(main)
        with torch.cuda.stream(self.side):
            self._eager(fn, count)
        main.wait_stream(self.side)

    def _capture(self, fn: Callable[[], None]) -> torch.cuda.CUDAGraph:
        torch = self.torch
        graph = torch.cuda.CUDAGraph()
        main = torch.cuda.current_stream(self.device)
        self.side.wait_stream(main)
        # One pool for every graph: they replay one after another on one stream and keep no tensor alive
        # past their own replay (inputs, gradients, optimizer state and the loss sum live outside it).
        # capture_begin/end rather than torch.cuda.graph(): that one empties the allocator's cache before
        # every capture, which the eager warm-up steps of the next width would pay for again.
        with torch.cuda.stream(self.side):
            graph.capture_begin(pool=self.pool)
            try:
                try:
                    fn()
                except BaseException:
                    # The capture is void already: ending it raises too, and must not hide why it failed.
                    with suppress(Exception):
                        graph.capture_end()
                    raise
                graph.capture_end()
            except BaseException:
                release_generator(torch, self.device)
                raise
        main.wait_stream(self.side)
        return graph

    # -- ahead of the training clock (--gpu-warmup) --------------------------------------------------

    def prepare(self, widths: Iterable[StepKey]) -> float:
        """Warm up and capture `widths` (those the run's batches use) and the update before the first training
        step, leaving no trace: filler rows only (loss weight 0: every gradient exactly 0, nothing added to the
        loss sum), the update once at learning rate 0 (AdamW's state is created as zeros, as its first real step
        would create it; its step counters go back to 0), the device generator and the loss sum restored. On a
        resumed run the optimizer state already holds moments, which even a zero update would decay: the update
        is then left to the lazy path (eager once, captured next). Returns the seconds it took."""
        torch = self.torch
        started = time.perf_counter()
        widths = [k for k in sorted(set(widths), key=key_order) if k in self.calls and k != "update"]
        update = not self.optimizer.state
        rng = _rng_state(torch, self.device)
        loss = self.loss_acc.detach().clone()
        key: CallKey  # (a width's key, then "update" too)
        try:
            for key in widths:  # (an unmasked key's filler rows attend to padding: their loss weight is 0 all the same)
                self._load(key_width(key), np.zeros(0, dtype=np.int64), 1.0)
                self._warm(key)
            if update:
                saved = [lr.detach().clone() for lr in self.lr_tensors]
                # (fp16: the warm update counts as a finite step towards the loss scale's growth; put it back.
                # load_state_dict fills the scaler's tensors in place, where the graphs read them.)
                scaler = self.scaler
                scaler_state = scaler.state_dict() if scaler is not None else None
                for lr in self.lr_tensors:
                    lr.zero_()
                try:
                    self._warm("update")
                finally:
                    for lr, value in zip(self.lr_tensors, saved, strict=True):
                        lr.copy_(value)
                    if scaler is not None and scaler_state is not None:
                        scaler.load_state_dict(scaler_state)
                for state in self.optimizer.state.values():
                    step = state.get("step")
                    if isinstance(step, torch.Tensor):
                        step.zero_()
                    elif step is not None:
                        state["step"] = 0
            for key in (*widths, *(["update"] if update else [])):
                if self.capture and key not in self.graphs:
                    self._try_capture(key, " ahead")
        finally:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            _set_rng_state(torch, self.device, rng)
            self.loss_acc.copy_(loss)
        self.prepare_seconds = time.perf_counter() - started
        return self.prepare_seconds

    def _warm(self, key: CallKey) -> None:
        """The eager calls of `key` (`warmup` of them) where its capture will run, counted as the warm-up the lazy
        path would do."""
        fn = self.calls[key]
        for _ in range(self.warmup if key != "update" else 1):
            if self.capture:
                self._on_side_stream(fn, "warmup")
            else:
                self._eager(fn, "warmup")
        self.seen[key] = max(self.seen.get(key, 0), self.warmup)

    def report(self) -> dict:
        """What the graph path did, for the run's metrics.json: its switches as they ended (a switch the model
        could not take is off; still_capturing False: a capture failed and the steps went on eagerly), its
        counts and the seconds its captures took."""
        return {"still_capturing": self.capture, "capture_seconds": round(self.capture_seconds, 3),
                "weight_copies": self.copies is not None,
                "shared_casts": self.shared_casts is not None, "unmask_full_batches": self.unmask_full,
                "compiled_blocks": len(self.compiled) if isinstance(self.compiled, CompiledBlocks) else 0,
                "fused_projections": self.fused,
                "widths": list(self.widths), **self.counts}

    def summary(self) -> str:
        c = self.counts
        ahead = (f" ({c['warmup']} filler warm-ups and the captures done ahead in {self.prepare_seconds:.2f} s)"
                 if c["warmup"] else "")
        return (f"{c['captured']} graphs captured in {self.capture_seconds:.2f} s, {c['replays']} replays, "
                f"{c['eager']} eager calls{ahead}")


def release_generator(torch: ModuleType, device: torch.device) -> None:
    """After a failed capture. Torch ends the stream's capture, but a capture_end that raises leaves the device's
    generator marked as capturing, and its next draw outside a capture fails: the eager fallback's first dropout
    raised "Offset increment outside graph capture encountered unexpectedly" (H100, torch 2.11, 2026-11-26). The
    generator goes on from the same seed and offset, on a copy of its state that no capture holds."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    generator = torch.cuda.default_generators[index]
    generator.graphsafe_set_state(generator.clone_state())


def _rng_state(torch: ModuleType, device: torch.device) -> torch.Tensor:
    return torch.cuda.get_rng_state(device) if device.type == "cuda" else torch.get_rng_state()


def _set_rng_state(torch: ModuleType, device: torch.device, state: torch.Tensor) -> None:
    if device.type == "cuda":
        torch.cuda.set_rng_state(state, device)
    else:
        torch.set_rng_state(state)


def prewarm(model: torch.nn.Module, widths: tuple[int, ...], rows: int, device: torch.device,
            autocast_dtype: torch.dtype | None, stop: Callable[[], bool] | None = None) -> float:
    """One training forward and backward per width on filler rows, to pay the GPU's first-use costs before the
    training clock starts: on an H200 the first step took 0.6 s (CUDA's lazy module loading, cuBLAS and cuDNN
    handles) and the first step of each new width ~0.12 s (cuDNN attention plans, cuBLAS heuristics), against
    2.8 ms a replayed step (bench/gpu_warmup.py). `task.run` calls it on the training thread while a worker
    thread tokenizes; after the first width it stops as soon as `stop()` is true. It leaves no trace: no
    optimizer step, gradients back to None, the generator's state restored (the run draws the same dropout masks
    as without it). Returns the seconds it took."""
    import torch

    started = time.perf_counter()
    token = min(1000, getattr(model.config, "vocab_size", 1001) - 1)
    eos = getattr(model.config, "eos_token_id", None)
    rng = _rng_state(torch, device)
    was_training = model.training
    model.train()
    try:
        for i, width in enumerate(widths):
            if i and stop is not None and stop():
                break
            ids = torch.full((rows, width), token, dtype=torch.long, device=device)
            mask = torch.ones_like(ids)
            mask[:, width // 2:] = 0  # padded rows, as real batches have: the masked attention kernels
            if isinstance(eos, int):  # each row ends as a tokenizer ends it (BART's head asks for one <eos> a row)
                ids[:, width // 2 - 1] = eos
            ctx = (nullcontext() if autocast_dtype is None
                   else torch.autocast(device.type, dtype=autocast_dtype, cache_enabled=False))
            with ctx:
                logits = model(input_ids=ids, attention_mask=mask).logits
            logits.float().sum().backward()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    finally:
        model.zero_grad(set_to_none=True)
        _set_rng_state(torch, device, rng)
        model.train(was_training)
    return time.perf_counter() - started
