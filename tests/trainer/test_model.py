import pytest

torch = pytest.importorskip("torch")

from ftcli_trainer.model import load_model, use_fast_dropout  # noqa: E402


def test_fast_dropout_has_dropouts_distribution():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.1), torch.nn.Dropout(0.0))
    assert use_fast_dropout(model) == 1  # p=0 left alone
    drop = model[1]
    x = torch.ones(2000, 500)
    y = drop(x)
    dropped = (y == 0).float().mean().item()
    assert abs(dropped - 0.1) < 0.002
    assert abs(y.mean().item() - 1.0) < 0.005  # kept values scaled: expectation unchanged
    assert torch.allclose(y[y != 0], torch.full_like(y[y != 0], 1 / (1 - drop.threshold / drop.RES)))
    # Four masks come from each 64-bit draw: every lane has the rate, and neighbours are independent.
    lanes = (y == 0).float().view(-1, 4)
    assert ((lanes.mean(0) - 0.1).abs() < 0.004).all()
    assert abs((lanes[:, 0] * lanes[:, 1]).mean().item() - 0.01) < 0.002
    assert abs((lanes[:, 3] * lanes[:, 2]).mean().item() - 0.01) < 0.002
    drop.eval()
    assert torch.equal(drop(x), x)
    drop.train()
    torch.manual_seed(1)
    a = drop(x)
    torch.manual_seed(1)
    assert torch.equal(a, drop(x))  # seeded: a resumed run draws the same masks


def test_swapping_keeps_weights_and_gradients_flow(tiny_model):
    model = load_model(str(tiny_model), ["a", "b"], False, 0.5)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert use_fast_dropout(model) > 0
    assert model.state_dict().keys() == before.keys()
    model.train()
    out = model(input_ids=torch.tensor([[2, 5, 6, 3]]), attention_mask=torch.ones(1, 4, dtype=torch.long)).logits
    out.sum().backward()
    assert model.classifier.weight.grad is not None


def test_cpu_training_attention_is_sdpa_math(monkeypatch):
    """With the dropout mask taken out, the training path computes what torch's SDPA computes: the same
    outputs and the same gradients, padding mask included."""
    import ftcli_trainer.model as fm

    monkeypatch.setattr(fm, "fast_dropout", lambda x, p, res=65536: x)
    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 4, 7, 16, requires_grad=True) for _ in range(3))
    mask = torch.ones(3, 1, 7, 7, dtype=torch.bool)
    mask[0, :, :, 5:] = False  # padded keys
    module = torch.nn.Module()  # training, not causal
    ours, _ = fm._cpu_training_attention(module, q, k, v, mask, dropout=0.1, scaling=0.3)
    theirs = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3).transpose(1, 2)
    torch.testing.assert_close(ours, theirs)
    g = torch.randn_like(ours)
    grads_ours = torch.autograd.grad(ours, (q, k, v), g)
    grads_theirs = torch.autograd.grad(theirs, (q, k, v), g)
    for a, b in zip(grads_ours, grads_theirs, strict=True):
        torch.testing.assert_close(a, b)


def test_fast_attention_dropout_in_training_only(tiny_model, tmp_path, monkeypatch):
    import json

    import ftcli_trainer.model as fm

    model = load_model(str(tiny_model), ["a", "b"], False, 0.5)
    layers = model.config.num_hidden_layers
    batch = dict(input_ids=torch.tensor([[2, 5, 6, 3], [2, 7, 3, 0]]),
                 attention_mask=torch.tensor([[1] * 4, [1, 1, 1, 0]]))
    model.eval()
    with torch.no_grad():
        before = model(**batch).logits
    assert fm.use_fast_attention_dropout(model)
    calls = []
    real = fm.fast_dropout
    monkeypatch.setattr(fm, "fast_dropout", lambda x, p, res=65536: calls.append(p) or real(x, p, res))
    with torch.no_grad():
        torch.testing.assert_close(model(**batch).logits, before)  # evaluation: plain SDPA, no dropout
    assert calls == []
    model.train()
    model(**batch).logits.sum().backward()
    assert calls == [model.config.attention_probs_dropout_prob] * layers
    model.save_pretrained(tmp_path)
    assert fm.FAST_ATTENTION not in (tmp_path / "config.json").read_text()
    fm.restore_attention(model)
    assert model.config._attn_implementation == "sdpa"
    assert json.loads((tmp_path / "config.json").read_text())["num_hidden_layers"] == layers


def test_a_half_precision_checkpoint_trains_in_float32(tiny_model, tmp_path):
    """transformers 5 loads in the checkpoint's dtype; the trainer must not train (and keep AdamW states)
    in fp16 because the checkpoint was saved that way."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    half = AutoModelForSequenceClassification.from_pretrained(str(tiny_model), dtype=torch.float16)
    assert next(half.parameters()).dtype == torch.float16
    half.save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(str(tiny_model)).save_pretrained(tmp_path)
    model = load_model(str(tmp_path), ["a", "b"], False, 0.5)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert {b.dtype for b in model.buffers() if b.is_floating_point()} <= {torch.float32}


def test_a_model_folder_without_its_tokenizer_is_refused_not_trained_on_unknown_tokens(tiny_model, tmp_path):
    """transformers 5 loads a folder with no tokenizer files as a tokenizer of its special tokens only, with no
    error: `ftcli local` (and a Vertex job) trained on [CLS] [UNK] ... [SEP] and exported that tokenizer."""
    import shutil

    from ftcli_trainer.errors import TrainerError
    from ftcli_trainer.model import load_tokenizer, model_problem

    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):  # model.save_pretrained(DIR) alone
        shutil.copy(tiny_model / name, bare / name)
    assert model_problem(str(bare)) == (
        f"--model {bare}: the folder has a model but no tokenizer (tokenizer.json, vocab.txt, vocab.json, "
        "spiece.model, ...): save its tokenizer there too, AutoTokenizer.from_pretrained(BASE_MODEL)"
        ".save_pretrained(FOLDER)")
    with pytest.raises(TrainerError) as e:  # the trainer's own check, for a Hub id or a folder that got past
        load_tokenizer(str(bare))
    assert str(e.value) == (f"cannot use {str(bare)!r}: the tokenizer has no vocabulary (its 5 special tokens only: "
                            "the tokenizer's files are missing). Save the model's tokenizer into its folder "
                            "(tokenizer.save_pretrained), or pass a Hugging Face model id")
    # a slow tokenizer's vocabulary alone is a tokenizer
    (bare / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad"]) + "\n")
    assert model_problem(str(bare)) is None
    assert len(load_tokenizer(str(bare))) == 7
    assert model_problem(str(tiny_model)) is None


@pytest.mark.parametrize("kind", ["sentencepiece", "tiktoken"])
def test_a_tokenizer_file_whose_package_is_missing_is_named_with_its_package(tiny_model, tmp_path, capsys, kind):
    """microsoft/deberta-v3-base ships spm.model and no tokenizer.json: without sentencepiece, transformers 5.24 fell
    back to reading it as a tiktoken file and the run said "`tiktoken` is required to read a `tiktoken` file. Install
    it with `pip install tiktoken`" (after a paragraph of transformers' warnings): the wrong package."""
    import importlib.util
    import json
    import shutil

    from ftcli_trainer.errors import TrainerError
    from ftcli_trainer.model import load_tokenizer, model_problem

    if importlib.util.find_spec(kind) is not None:
        # sentencepiece is one of the trainer's dependencies (test_a_sentencepiece_only_tokenizer_loads): its missing
        # case is for an environment without it, as tiktoken's always is here
        pytest.skip(f"{kind} is installed here")
    folder = _spm_folder(tiny_model, tmp_path) if kind == "sentencepiece" else tmp_path / "spm"
    if kind == "sentencepiece":
        name, said = "spm.model", "a SentencePiece model, which transformers reads with the sentencepiece package"
    else:  # a tiktoken file: a base64 token and its rank a line
        folder.mkdir()
        for file in ("config.json", "model.safetensors"):
            shutil.copy(tiny_model / file, folder / file)
        (folder / "tokenizer.model").write_text("Z29vZA== 0\nYmFk 1\n")
        name, said = "tokenizer.model", "a tiktoken file, which transformers reads with the tiktoken package"
        (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    assert model_problem(str(folder)) is None
    with pytest.raises(TrainerError) as e:
        load_tokenizer(str(folder))
    assert str(e.value) == (f"cannot load the tokenizer of {str(folder)!r}: its {name} is {said}: pip install {kind} "
                            "(or save the tokenizer as tokenizer.json where that package is installed: "
                            "tokenizer.save_pretrained)")
    assert capsys.readouterr().err == ""  # no paragraph of transformers' own before it


def _spm_folder(tiny_model, tmp_path):
    """A model folder whose tokenizer is only a SentencePiece model (spm.model, as microsoft/deberta-v3-base ships):
    its protobuf as spm_train writes it."""
    import json
    import shutil
    import subprocess
    import sys

    folder = tmp_path / "spm"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_model / name, folder / name)
    # In another process: the proto module registers sentencepiece_model.proto in protobuf's descriptor pool, and
    # transformers' own reader registering it again in this one failed ("duplicate file name").
    code = ("import sys\nfrom transformers.utils import sentencepiece_model_pb2_new as sp\nproto = sp.ModelProto()\n"
            "for i, piece in enumerate(['<pad>', '<unk>', '[CLS]', '[SEP]', '\\u2581good', '\\u2581bad']):\n"
            "    proto.pieces.add(piece=piece, score=-float(i), type=2 if piece == '<unk>' else 3 if i < 4 else 1)\n"
            "proto.trainer_spec.unk_id = 1\nopen(sys.argv[1], 'wb').write(proto.SerializeToString())\n")
    subprocess.run([sys.executable, "-c", code, str(folder / "spm.model")], check=True, timeout=120)
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "DebertaV2Tokenizer"}))
    return folder


def test_a_sentencepiece_only_tokenizer_loads_with_the_trainers_own_dependencies(tiny_model, tmp_path):
    # A DeBERTa-v3 job failed at its start on Vertex: sentencepiece, which reads spm.model, was not among the
    # trainer's requirements (the job installs only those)
    from ftcli.packaging import TRAINER_DEPENDENCIES
    from ftcli_trainer.model import load_tokenizer

    assert any(d.startswith("sentencepiece") for d in TRAINER_DEPENDENCIES)
    tok = load_tokenizer(str(_spm_folder(tiny_model, tmp_path)))
    assert tok.convert_ids_to_tokens(tok("good bad", add_special_tokens=False)["input_ids"]) == [
        "\u2581good", "\u2581bad"]


@pytest.mark.parametrize("tokenizer", ["ByT5Tokenizer", "CanineTokenizer", "PerceiverTokenizer"])
def test_a_tokenizer_that_needs_no_vocabulary_file_is_a_tokenizer(tiny_model, tmp_path, tokenizer):
    # The no-tokenizer check refused fine-tuned ByT5, CANINE and Perceiver folders: their tokenizers read bytes or
    # code points, and save_pretrained writes only tokenizer_config.json
    import shutil

    import transformers

    from ftcli_trainer.model import load_tokenizer, model_problem

    folder = tmp_path / "m"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_model / name, folder / name)
    getattr(transformers, tokenizer)().save_pretrained(folder)
    assert model_problem(str(folder)) is None
    assert len(load_tokenizer(str(folder))) > 255  # a byte or code-point vocabulary, not 5 special tokens


def test_a_fine_tuned_models_head_is_kept_only_for_its_own_labels(tiny_model, tmp_path):
    """A model ftcli exported (negative, positive) as --model for a run on other labels of the same number: transformers
    keeps any head of the right size, so the run started from the old answers (positive, negative: reversed) and
    the summary said "new head"."""
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    from ftcli_trainer.task import _head_line

    torch.manual_seed(0)
    exported = tmp_path / "exported"
    load_model(str(tiny_model), ["negative", "positive"], False, 0.5).save_pretrained(exported)
    AutoTokenizer.from_pretrained(str(tiny_model)).save_pretrained(exported)
    saved = load_file(exported / "model.safetensors")

    def loaded(labels, multi_label=False, regression=False):
        torch.manual_seed(1)
        model = load_model(str(exported), labels, multi_label, 0.5, regression)
        encoder = "bert.encoder.layer.0.output.dense.weight"
        assert torch.equal(model.get_parameter(encoder), saved[encoder])
        return model, model.classifier.weight.detach()

    model, weight = loaded(["Negative", "Positive"])  # the same labels (case aside): training goes on from its head
    assert model.ftcli_head == "kept" and torch.equal(weight, saved["classifier.weight"])
    assert _head_line(model, "2 labels") == "its own head, trained for these labels: 2 labels"
    for labels, multi_label, regression in ((["bad", "good"], False, False), (["positive", "negative"], False, False),
                                            (["negative", "positive"], True, False), (["a", "b", "c"], False, False),
                                            (["score"], False, True)):
        model, weight = loaded(labels, multi_label, regression)
        assert model.ftcli_head == "replaced: negative, positive", labels
        assert weight.shape == (len(labels), 32) and not torch.equal(weight[:2], saved["classifier.weight"][:2])
        assert model.classifier.bias.abs().sum() == 0  # as transformers makes a missing head
        assert 0.01 < weight.std() < 0.03  # config.initializer_range 0.02
        assert model.config.id2label == dict(enumerate(labels))
    assert _head_line(model, "1 output") == \
        "new head: 1 output; the model's own head, for negative, positive, is not reused"
    # a model without a head (the offline MiniLM is a sentence-transformers encoder)
    bare = tmp_path / "bare"
    model.bert.save_pretrained(bare)
    AutoTokenizer.from_pretrained(str(tiny_model)).save_pretrained(bare)
    model = load_model(str(bare), ["bad", "good"], False, 0.5)
    assert model.ftcli_head == "new" and _head_line(model, "2 labels") == "new head: 2 labels"


def test_a_hugging_face_cache_folder_names_its_snapshot(tiny_model, tmp_path):
    # `--model ~/.cache/huggingface/hub/models--ORG--NAME` said "the folder has no config.json; give a folder that
    # save_pretrained wrote", with the model two folders down.
    import shutil

    from ftcli_trainer.model import model_problem

    repo = tmp_path / "models--org--tiny"
    for commit in ("aaaa", "bbbb"):
        shutil.copytree(tiny_model, repo / "snapshots" / commit)
    (repo / "blobs").mkdir()
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("bbbb")  # the branch's commit, with no line break, as huggingface_hub writes
    assert model_problem(str(repo)) == (f"--model {repo} is a Hugging Face cache folder: give the model's snapshot, "
                                        f"--model {repo / 'snapshots' / 'bbbb'}")
    assert model_problem(str(repo / "snapshots" / "bbbb")) is None
    (repo / "refs" / "main").unlink()  # no ref, two snapshots: which one is not guessed
    assert "the folder has no config.json" in model_problem(str(repo))
    shutil.rmtree(repo / "snapshots" / "aaaa")
    assert model_problem(str(repo)).endswith(f"--model {repo / 'snapshots' / 'bbbb'}")


def test_a_folders_max_length_is_read_from_its_files_as_the_loaded_model_holds_it(tiny_model, tmp_path):
    # The launcher's side of max_length_problem (no torch there): the job loaded the data and the model, then stopped.
    import json
    import shutil

    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from ftcli_trainer.model import folder_max_length_problem, max_length_problem

    loaded = (AutoModelForSequenceClassification.from_pretrained(tiny_model, num_labels=2),
              AutoTokenizer.from_pretrained(tiny_model))
    for n in (128, 129, 512):  # the same answer from the files and from the loaded model
        assert folder_max_length_problem(str(tiny_model), n, "m") == max_length_problem(*loaded, n, "m")
    assert folder_max_length_problem(str(tiny_model), 129, "m") == ("--max-length 129 is longer than m takes (128 "
                                                                     "tokens): give --max-length 128 or less")
    folder = tmp_path / "m"
    shutil.copytree(tiny_model, folder)
    config = json.loads((folder / "config.json").read_text())

    def write(name: str, data: dict) -> None:
        (folder / name).write_text(json.dumps(data))

    # RoBERTa's shape: 514 positions, a tokenizer that takes 512
    write("config.json", {**config, "max_position_embeddings": 514})
    write("tokenizer_config.json", {**json.loads((tiny_model / "tokenizer_config.json").read_text()),
                                    "model_max_length": 512})
    assert folder_max_length_problem(str(folder), 513, "m").endswith("(512 tokens): give --max-length 512 or less")
    assert folder_max_length_problem(str(folder), 512, "m") is None
    write("config.json", {**config, "position_biased_input": False})  # DeBERTa-v2: relative positions, no limit
    assert folder_max_length_problem(str(folder), 4096, "m") is None
    write("config.json", {k: v for k, v in config.items() if k != "max_position_embeddings"})  # (GPT-2: n_positions)
    assert folder_max_length_problem(str(folder), 4096, "m") is None
    (folder / "config.json").write_text("{not json")
    assert folder_max_length_problem(str(folder), 4096, "m") is None


# --varlen-attention: torch's flash kernel over each row's own tokens. The kernel runs on CUDA only; on a CPU the
# layout is checked against a reference that keeps the kernel's contract (each sequence between two offsets
# attends over itself; every sequence at most `width` long; together they cover every token once).


def test_varlen_offsets_split_each_row_into_its_tokens_and_its_padding():
    import ftcli_trainer.model as fm

    offsets = fm.varlen_offsets(torch.tensor([3, 4, 1]), 4)
    assert offsets.dtype == torch.int32
    assert offsets.tolist() == [0, 3, 4, 8, 8, 9, 12]  # row 1 fills its width: its padding is empty


def _reference_flash(query, key, value, offsets, width, dropout, scale):
    import torch.nn.functional as F

    assert dropout == 0.0
    if offsets is None:  # (rows, width, heads, dim)
        t = [x.transpose(1, 2) for x in (query, key, value)]
        return F.scaled_dot_product_attention(*t, scale=scale).transpose(1, 2)
    cuts = offsets.tolist()
    assert cuts[0] == 0 and cuts[-1] == query.shape[0]
    assert all(0 <= b - a <= width for a, b in zip(cuts, cuts[1:], strict=False))
    out = torch.full_like(query, float("nan"))
    for a, b in zip(cuts, cuts[1:], strict=False):
        if b > a:
            t = [x[a:b].transpose(0, 1) for x in (query, key, value)]  # (heads, tokens, dim)
            out[a:b] = F.scaled_dot_product_attention(*t, scale=scale).transpose(0, 1)
    assert not out.isnan().any()  # every token computed
    return out


def _varlen_vs_sdpa(tiny_model, monkeypatch, batch, flash=_reference_flash):
    import ftcli_trainer.model as fm

    torch.manual_seed(0)
    sdpa = load_model(str(tiny_model), ["a", "b"], False, 0.5)
    varlen = load_model(str(tiny_model), ["a", "b"], False, 0.5)
    varlen.load_state_dict(sdpa.state_dict())
    assert fm.switch_to_varlen(varlen)
    monkeypatch.setattr(fm, "_flash_runs", lambda q: True)
    monkeypatch.setattr(fm, "_flash", flash)
    out = {}
    for name, model in (("sdpa", sdpa), ("varlen", varlen)):
        model.eval()  # dropout off: the two runs draw from different generators on a GPU
        logits = model(**batch).logits
        logits.float().pow(2).sum().backward()
        out[name] = (logits.detach(), {n: p.grad for n, p in model.named_parameters()})
    return out


def test_varlen_attention_is_the_padded_attention_on_the_real_tokens(tiny_model, monkeypatch):
    """A short row, a full row and a one-token row: the logits and every gradient are those of SDPA under the
    padding mask."""
    batch = dict(input_ids=torch.tensor([[2, 5, 6, 3, 0], [2, 7, 8, 9, 3], [2, 0, 0, 0, 0]]),
                 attention_mask=torch.tensor([[1, 1, 1, 1, 0], [1] * 5, [1, 0, 0, 0, 0]]))
    out = _varlen_vs_sdpa(tiny_model, monkeypatch, batch)
    torch.testing.assert_close(out["varlen"][0], out["sdpa"][0], rtol=1e-5, atol=1e-6)
    for name, grad in out["sdpa"][1].items():
        torch.testing.assert_close(out["varlen"][1][name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_varlen_attention_without_padding_runs_the_dense_kernel(tiny_model, monkeypatch):
    seen = []
    batch = dict(input_ids=torch.tensor([[2, 5, 6, 3], [2, 7, 8, 3]]),
                 attention_mask=torch.ones(2, 4, dtype=torch.long))
    out = _varlen_vs_sdpa(tiny_model, monkeypatch, batch, lambda *a: seen.append(a[3]) or _reference_flash(*a))
    torch.testing.assert_close(out["varlen"][0], out["sdpa"][0], rtol=1e-5, atol=1e-6)
    assert seen == [None, None]  # both layers, no offsets: HF passes no mask for a batch without padding


def test_varlen_offsets_are_made_once_a_forward(tiny_model, monkeypatch):
    import ftcli_trainer.model as fm

    made = []
    real = fm.varlen_offsets
    monkeypatch.setattr(fm, "varlen_offsets", lambda lengths, width: made.append(width) or real(lengths, width))
    batch = dict(input_ids=torch.tensor([[2, 5, 3, 0], [2, 7, 8, 3]]),
                 attention_mask=torch.tensor([[1, 1, 1, 0], [1] * 4]))
    _varlen_vs_sdpa(tiny_model, monkeypatch, batch)
    assert made == [4]  # one forward of two layers


def test_varlen_attention_off_a_gpu_is_sdpa_exactly(tiny_model):
    """Where the flash kernel cannot run (here: a CPU, fp32), the attention is SDPA's, bit for bit."""
    import ftcli_trainer.model as fm

    model = load_model(str(tiny_model), ["a", "b"], False, 0.5).eval()
    batch = dict(input_ids=torch.tensor([[2, 5, 6, 3], [2, 7, 3, 0]]),
                 attention_mask=torch.tensor([[1] * 4, [1, 1, 1, 0]]))
    with torch.no_grad():
        before = model(**batch).logits
        assert fm.switch_to_varlen(model)
        assert torch.equal(model(**batch).logits, before)
    fm.restore_attention(model)
    assert model.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("device,precision,why", [
    ("cpu", "bf16", "needs a CUDA GPU"),
    pytest.param("cuda", "fp32", "this run is fp32", marks=[
        pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]),
])
def test_varlen_attention_says_why_it_stays_off(tiny_model, device, precision, why):
    import ftcli_trainer.model as fm

    model = load_model(str(tiny_model), ["a", "b"], False, 0.5)
    assert why in fm.use_varlen_attention(model, torch.device(device), precision)
    assert model.config._attn_implementation == "sdpa"


def test_the_attention_in_use_is_said_as_it_ran(tiny_model, monkeypatch):
    """metrics.json's "attention": SDPA, the varlen flash kernel, or SDPA with why --varlen-attention was not on."""
    import ftcli_trainer.model as fm

    monkeypatch.setattr(fm, "_FLASH_REFUSED", [])
    model = load_model(str(tiny_model), ["a", "b"], False, 0.5)
    assert fm.attention_in_use(model) == "sdpa"
    why = "it needs a CUDA GPU"
    assert fm.attention_in_use(model, why) == f"sdpa (--varlen-attention left off: {why})"
    assert fm.switch_to_varlen(model)
    assert fm.attention_in_use(model) == "flash, variable-length"
    # a call the flash kernel does not fit runs SDPA, and the record says so: here every call (fp32 on a CPU)
    model(input_ids=torch.tensor([[2, 5, 6, 3], [2, 7, 3, 0]]), attention_mask=torch.tensor([[1] * 4, [1, 1, 1, 0]]))
    layers = model.config.num_hidden_layers
    assert fm.VARLEN_CALLS == {"flash": 0, "sdpa": layers, "why": "torch.float32 inputs on cpu"}
    assert fm.attention_in_use(model) == ("sdpa (--varlen-attention's flash kernel fit no call: torch.float32 inputs "
                                          "on cpu)")
    fm.VARLEN_CALLS["flash"] = 3 * layers
    assert fm.attention_in_use(model) == (f"flash, variable-length ({layers} of {4 * layers} calls on SDPA: "
                                          "torch.float32 inputs on cpu)")
    assert fm.switch_to_varlen(model)  # switched on again: a new record
    assert fm.attention_in_use(model) == "flash, variable-length"
    refusal = "FlashAttention only supports Ampere GPUs or newer."
    fm._FLASH_REFUSED.append(refusal)
    assert fm.attention_in_use(model) == f"sdpa (the flash kernel refused: {refusal})"
    assert fm._switch_attention(model, fm.FAST_ATTENTION, fm._cpu_training_attention)
    assert fm.attention_in_use(model) == "sdpa"  # (the CPU's dropout path is SDPA's math)
    fm.restore_attention(model)
    assert fm.keep_attention_out_of_compile(model)  # (for layers compiled inside CUDA graphs: SDPA all the same)
    assert model.config._attn_implementation == fm.UNTRACED_SDPA and fm.attention_in_use(model) == "sdpa"
    fm.restore_attention(model)  # the saved model names plain SDPA
    assert model.config._attn_implementation == "sdpa"
    model.set_attn_implementation("eager")  # a model not on SDPA keeps its attention
    assert not fm.keep_attention_out_of_compile(model) and model.config._attn_implementation == "eager"


def test_a_flash_kernel_that_refuses_leaves_sdpa_with_one_line(tiny_model, monkeypatch, caplog):
    """The kernel's own checks (a GPU or build it does not support, a shape) raise on the host: the attention
    is then SDPA's for the rest of the run, said once."""
    import logging

    import ftcli_trainer.model as fm

    monkeypatch.setattr(fm, "_FLASH_REFUSED", [])
    calls = []

    def refuse(*a):
        calls.append(1)
        raise RuntimeError("FlashAttention only supports Ampere GPUs or newer.")

    batch = dict(input_ids=torch.tensor([[2, 5, 6, 3], [2, 7, 3, 0]]),
                 attention_mask=torch.tensor([[1] * 4, [1, 1, 1, 0]]))
    with caplog.at_level(logging.WARNING, logger="ftcli_trainer"):
        out = _varlen_vs_sdpa(tiny_model, monkeypatch, batch, refuse)
    assert torch.equal(out["varlen"][0], out["sdpa"][0])  # SDPA's numbers exactly
    assert calls == [1]  # tried once, then never again
    lines = [r.getMessage() for r in caplog.records if "--varlen-attention off" in r.getMessage()]
    assert len(lines) == 1 and "only supports Ampere" in lines[0]
