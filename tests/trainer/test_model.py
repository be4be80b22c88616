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
