"""Label smoothing and the warm-up rate against seed 000's numbers and independent references."""

import math
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from decoderkit.training.objective import LabelSmoothingLoss, noam_rate


def numpy_smoothed_ce(logits, target, eps, convention, ignore):
    """Float64 re-derivation: build q explicitly, average -sum q log p over kept rows."""
    logits = np.asarray(logits, dtype=np.float64)
    V = logits.shape[1]
    logp = logits - logits.max(1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(1, keepdims=True))
    losses = []
    for row, y in zip(logp, target, strict=True):
        if y == ignore:
            continue
        if convention == "uniform":
            q = np.full(V, eps / V)
            q[y] += 1 - eps
        else:
            q = np.full(V, eps / (V - 1))
            q[y] = 1 - eps
        losses.append(-(q * row).sum())
    return float(np.mean(losses))


def test_seed_five_class_targets():
    uniform = LabelSmoothingLoss(0.1, "uniform", ignore_index=None)
    q = uniform.target_distribution(torch.tensor([3]), 5)[0]
    assert q[3].item() == pytest.approx(0.92, abs=1e-12)
    assert torch.allclose(q[[0, 1, 2, 4]], torch.full((4,), 0.02, dtype=torch.float64))
    exclusive = LabelSmoothingLoss(0.1, "exclusive", ignore_index=None)
    q = exclusive.target_distribution(torch.tensor([3]), 5)[0]
    assert q[3].item() == pytest.approx(0.9, abs=1e-12)
    assert q.sum().item() == pytest.approx(1.0, abs=1e-12)


def test_seed_four_class_example_loss():
    logits = torch.tensor([[0.2, -0.3, 1.4, 0.1]])
    loss = LabelSmoothingLoss(0.1, ignore_index=None)(F.log_softmax(logits, -1),
                                                      torch.tensor([2]))
    assert loss.item() == pytest.approx(0.66827178, abs=5e-8)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), eps=st.floats(0.0, 0.5), V=st.integers(2, 9))
def test_uniform_equals_torch_cross_entropy(seed, eps, V):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(7, V, generator=g) * 3
    target = torch.randint(0, V, (7,), generator=g)
    target[0], target[1] = 0, 1 + int(target[1]) % (V - 1)  # a pad, and a real token (else
    # torch gives 0/0 = NaN where ours gives 0: a batch without targets adds nothing)
    ours = LabelSmoothingLoss(eps, "uniform", ignore_index=0)(F.log_softmax(logits, -1), target)
    ref = F.cross_entropy(logits, target, ignore_index=0, label_smoothing=eps)
    assert abs(ours.item() - ref.item()) < 1e-6


@pytest.mark.parametrize("convention", ["uniform", "exclusive"])
def test_matches_float64_rederivation(convention):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 5, generator=g, dtype=torch.float64)
    target = torch.tensor([1, 0, 4, 2, 0, 3])
    ours = LabelSmoothingLoss(0.2, convention, ignore_index=0)(F.log_softmax(logits, -1), target)
    ref = numpy_smoothed_ce(logits.numpy(), target.tolist(), 0.2, convention, 0)
    assert ours.item() == pytest.approx(ref, abs=1e-12)


def test_padding_contributes_nothing_and_reductions():
    g = torch.Generator().manual_seed(1)
    lp = F.log_softmax(torch.randn(5, 6, generator=g), -1)
    target = torch.tensor([3, 0, 2, 0, 5])
    loss = LabelSmoothingLoss(0.1, ignore_index=0, reduction="none")
    per = loss(lp, target)
    assert per[1] == 0 and per[3] == 0
    lp2 = lp.clone()
    lp2[[1, 3]] = F.log_softmax(torch.randn(2, 6, generator=g), -1)  # change padded rows
    assert torch.equal(loss(lp2, target), per)
    total = LabelSmoothingLoss(0.1, ignore_index=0, reduction="sum")(lp, target)
    mean = LabelSmoothingLoss(0.1, ignore_index=0, reduction="mean")(lp, target)
    assert torch.allclose(total, per.sum()) and torch.allclose(mean, per.sum() / 3)
    empty = LabelSmoothingLoss(0.1, ignore_index=0)(lp, torch.zeros(5, dtype=torch.long))
    assert empty.item() == 0.0


def test_underflowed_probability_gives_finite_loss_and_gradient():
    lp = torch.tensor([[0.0, -math.inf, -math.inf]], requires_grad=True)
    for conv in ("uniform", "exclusive"):
        for eps in (0.0, 0.1):
            loss = LabelSmoothingLoss(eps, conv, ignore_index=None)(lp, torch.tensor([1]))
            loss.backward()
            assert torch.isfinite(loss) and torch.isfinite(lp.grad).all()
            lp.grad = None


def test_bad_arguments():
    with pytest.raises(ValueError, match="smoothing"):
        LabelSmoothingLoss(1.0)
    with pytest.raises(ValueError, match="convention"):
        LabelSmoothingLoss(0.1, "paper")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        LabelSmoothingLoss(0.1)(torch.zeros(2, 4), torch.tensor([1, 4]))
    with pytest.raises(ValueError, match="shape"):
        LabelSmoothingLoss(0.1)(torch.zeros(2, 3, 4), torch.tensor([1, 2]))



@pytest.mark.parametrize("convention", ["uniform", "exclusive"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_from_logits_equals_the_float64_rederivation_and_forward(convention, reduction):
    g = torch.Generator().manual_seed(4)
    logits = (torch.randn(9, 7, generator=g, dtype=torch.float64) * 3).requires_grad_()
    target = torch.tensor([1, 0, 6, 2, 0, 3, 5, 0, 4])
    loss = LabelSmoothingLoss(0.2, convention, ignore_index=0, reduction=reduction)
    fused = loss.from_logits(logits, target)
    kept = [i for i, y in enumerate(target.tolist()) if y != 0]
    per = [numpy_smoothed_ce(logits.detach().numpy()[i:i + 1], target[i:i + 1].tolist(), 0.2,
                             convention, 0) if i in kept else 0.0 for i in range(9)]
    ref = {"none": per, "sum": sum(per), "mean": sum(per) / len(kept)}[reduction]
    assert fused.detach().numpy() == pytest.approx(np.asarray(ref), abs=1e-12)
    grad_fused, = torch.autograd.grad(fused.sum(), logits)
    grad_ref, = torch.autograd.grad(loss(F.log_softmax(logits, -1), target).sum(), logits)
    assert torch.allclose(grad_fused, grad_ref, atol=1e-12, rtol=0)


def test_from_logits_without_targets_and_bad_ids():
    logits = torch.randn(3, 5)
    assert LabelSmoothingLoss(0.1, ignore_index=0).from_logits(
        logits, torch.zeros(3, dtype=torch.long)).item() == 0.0  # as forward's mean
    with pytest.raises(ValueError, match="target id 5 is outside the vocabulary"):
        LabelSmoothingLoss(0.1).from_logits(logits, torch.tensor([1, 5, 2]))
    with pytest.raises(ValueError, match="shape"):  # forward's own checks and messages
        LabelSmoothingLoss(0.1).from_logits(torch.zeros(2, 3, 4), torch.tensor([1, 2]))


SEED_TABLE = {  # seed 000, printed to 10 decimals
    512: {1: 0.0000001747, 1000: 0.0001746928, 4000: 0.0006987712, 8000: 0.0004941059},
    256: {1: 0.0000002471, 1000: 0.0002470529, 4000: 0.0009882118, 8000: 0.0006987712},
}


@pytest.mark.parametrize("d_model", [512, 256])
def test_noam_reproduces_seed_table(d_model):
    for step, printed in SEED_TABLE[d_model].items():
        assert f"{noam_rate(step, d_model):.10f}" == f"{printed:.10f}"
        # 10 significant digits against an independent float64 formula
        ref = d_model ** -0.5 * (step ** -0.5 if step > 4000 else step * 4000 ** -1.5)
        assert noam_rate(step, d_model) == pytest.approx(ref, rel=1e-10)


def test_noam_shape_and_errors():
    rates = [noam_rate(s, 512) for s in range(1, 12001)]
    assert int(np.argmax(rates)) + 1 == 4000
    assert noam_rate(4000, 512) == pytest.approx(512 ** -0.5 * 4000 ** -0.5, rel=1e-12)
    assert noam_rate(10, 64, warmup=5, factor=2.0) == pytest.approx(2 * 64 ** -0.5 * 10 ** -0.5)
    with pytest.raises(ValueError, match="step"):
        noam_rate(0, 512)


# --- the optimiser and one training step ------------------------------------------------

from torch.optim.lr_scheduler import LambdaLR  # noqa: E402

from decoderkit import make_model  # noqa: E402
from decoderkit.training.seq2seq.data import make_batch  # noqa: E402
from decoderkit.training.objective import make_optimizer, train_step  # noqa: E402
from decoderkit.training.seq2seq.objective import TeacherForced  # noqa: E402


def tiny_model(seed=0, dropout=0.0):
    torch.manual_seed(seed)
    return make_model(11, 13, N=1, d_model=16, d_ff=32, h=2, dropout=dropout, max_len=32)


def random_pairs(n, seed):
    g = random.Random(seed)
    return [([g.randrange(3, 11) for _ in range(g.randint(1, 7))],
             [g.randrange(3, 13) for _ in range(g.randint(1, 9))]) for _ in range(n)]


def sgd_step(model, batches):
    """One train_step under plain SGD (lr 1): the update is exactly minus the gradient."""
    module = TeacherForced(model, LabelSmoothingLoss(0.1, ignore_index=0, reduction="sum"))
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    loss = train_step(module, batches, opt, LambdaLR(opt, lambda s: 1.0), clip=None,
                      total_tokens=sum(b.n_tokens for b in batches))
    return loss, [p.detach().clone() for p in model.parameters()]


def test_accumulated_micro_batches_equal_one_big_batch():
    pairs = random_pairs(10, seed=2)
    whole = make_batch(pairs, 0, 1, 2)
    parts = [make_batch(pairs[:3], 0, 1, 2), make_batch(pairs[3:], 0, 1, 2)]
    assert parts[0].n_tokens != parts[1].n_tokens  # unequal: a plain mean of means would differ
    loss_a, params_a = sgd_step(tiny_model(), [whole])
    loss_b, params_b = sgd_step(tiny_model(), parts)
    before = list(tiny_model().parameters())
    assert loss_a == pytest.approx(loss_b, rel=1e-5)
    for a, b, p in zip(params_a, params_b, before, strict=True):
        assert torch.allclose(a - p, b - p, atol=1e-6, rtol=1e-4)
    # and the loss is the token mean of the criterion, checked against F.cross_entropy
    model = tiny_model()
    logits = model.generator.proj(model(whole.src, whole.tgt_in, whole.src_mask, whole.tgt_mask))
    ref = F.cross_entropy(logits.flatten(0, 1), whole.labels.flatten(), ignore_index=0,
                          label_smoothing=0.1)
    assert loss_a == pytest.approx(ref.item(), rel=1e-5)


def test_make_optimizer_follows_noam_and_paper_adam():
    model = tiny_model()
    opt, sched = make_optimizer(model, d_model=16, warmup=3, factor=2.0)
    group = opt.param_groups[0]
    assert group["betas"] == (0.9, 0.98) and group["eps"] == 1e-9
    for step in range(1, 7):
        assert group["lr"] == pytest.approx(noam_rate(step, 16, 3, 2.0), rel=1e-12)
        opt.step()
        sched.step()


def test_clipping_bounds_the_gradient_norm():
    model = tiny_model()
    module = TeacherForced(model, LabelSmoothingLoss(0.0, reduction="sum"))
    seen = {}
    opt = torch.optim.SGD(model.parameters(), lr=0.0)

    def spy(optimizer, args, kwargs):
        seen["norm"] = torch.cat([p.grad.flatten() for p in model.parameters()]).norm().item()

    opt.register_step_pre_hook(spy)
    batch = make_batch(random_pairs(6, seed=3), 0, 1, 2)
    train_step(module, [batch], opt, LambdaLR(opt, lambda s: 1.0), clip=1e-3,
               total_tokens=batch.n_tokens)
    assert seen["norm"] == pytest.approx(1e-3, rel=1e-3)
