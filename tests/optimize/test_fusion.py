"""Horizontal fusion: each of K fused jobs trains exactly as it would alone (to rounding),
with its own hyper-parameters, and one diverging job leaves the others unchanged."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from lightspeed.errors import ConfigError
from lightspeed.measure.step import StepSettings, prepare
from lightspeed.optimize.fusion.fuse import (
    FusedModel,
    SeededDropout,
    drop_jobs,
    fuse,
    seeded_dropout,
)
from lightspeed.optimize.fusion.optimizer import FusedOptimizer
from lightspeed.workload import Workload

K = 3
STEPS = 20


def mlp(batch_norm: bool, dropout: float = 0.0) -> nn.Module:
    # No bias before a BatchNorm (as usual): the norm removes it, so its gradient is
    # rounding noise, whose sign Adam's normalisation turns into full-size steps that no
    # two orders of summation share.
    layers: list[nn.Module] = [nn.Linear(12, 16, bias=not batch_norm)]
    if batch_norm:
        layers.append(nn.BatchNorm1d(16))
    layers += [nn.ReLU(), nn.Dropout(dropout), nn.Linear(16, 4)]
    return nn.Sequential(*layers)


def loss_of(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return nn.functional.cross_entropy(model(x), y)


ALGORITHMS: dict[str, tuple[Callable[..., torch.optim.Optimizer], list[dict[str, float]]]] = {
    "sgd-momentum": (
        lambda p, **h: torch.optim.SGD(p, **h),
        [
            {"lr": 0.1, "momentum": 0.9},
            {"lr": 0.03, "momentum": 0.5, "weight_decay": 0.01},
            {"lr": 0.2, "momentum": 0.0},
        ],
    ),
    "adam": (
        lambda p, **h: torch.optim.Adam(p, **h),
        [{"lr": 1e-2}, {"lr": 3e-3, "weight_decay": 0.1}, {"lr": 1e-3, "betas": (0.8, 0.99)}],
    ),
    "adamw": (
        lambda p, **h: torch.optim.AdamW(p, **h),
        [{"lr": 1e-2}, {"lr": 3e-3, "weight_decay": 0.1}, {"lr": 1e-3, "eps": 1e-6}],
    ),
}


def fused_names(h: dict[str, float]) -> dict[str, float]:
    """torch's keywords as the fused optimizer's (betas as beta1 and beta2)."""
    out = {k: v for k, v in h.items() if k != "betas"}
    if "betas" in h:
        out["beta1"], out["beta2"] = h["betas"]  # type: ignore[misc]
    return out


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).detach().norm() / b.detach().norm())


def fused_loss(
    fused: FusedModel, path: str, batch: tuple[torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    """The K jobs' summed loss: under vmap ("per-job") or as `FusedModel.loss` takes it
    ("folded": one batch through the layer rewrites, once its first call has checked it)."""
    if path == "per-job":
        return fused.per_job(loss_of, batch).sum()
    return fused.loss(loss_of, batch)


@pytest.mark.parametrize("path", ["per-job", "folded"])
@pytest.mark.parametrize("kernels", [True, False], ids=["fused-kernels", "foreach"])
@pytest.mark.parametrize("dtype, tolerance", [(torch.float64, 1e-10), (torch.float32, 1e-4)])
@pytest.mark.parametrize("model", ["plain", "batch-norm", "dropout"])
@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_each_fused_job_trains_as_it_would_alone(
    algorithm: str, model: str, dtype: torch.dtype, tolerance: float, kernels: bool, path: str
) -> None:
    build, hparams = ALGORITHMS[algorithm]
    torch.manual_seed(0)
    lone = [mlp(model == "batch-norm", 0.3 * (model == "dropout")).to(dtype) for _ in range(K)]
    for j, m in enumerate(lone):
        seeded_dropout(m, seed=100 * j)  # each job's own masks, the same fused or alone
    fused = FusedModel([nn.Sequential(*m) for m in lone])  # copies the initial weights
    kind = {"sgd-momentum": "sgd"}.get(algorithm, algorithm)
    fused_opt = FusedOptimizer(
        fused.parameters(), kind, [fused_names(h) for h in hparams], kernels=kernels
    )
    lone_opts = [build(m.parameters(), **h) for m, h in zip(lone, hparams, strict=True)]
    g = torch.Generator().manual_seed(1)
    for _ in range(STEPS):
        xs = torch.randn(K, 8, 12, generator=g, dtype=dtype)
        ys = torch.randint(0, 4, (K, 8), generator=g)
        fused_opt.zero_grad()
        fused_loss(fused, path, (xs, ys)).backward()
        fused_opt.step()
        for j, (m, opt) in enumerate(zip(lone, lone_opts, strict=True)):
            opt.zero_grad()
            loss_of(m, (xs[j], ys[j])).backward()
            opt.step()
    assert fused.direct  # an nn.Sequential of layers it rewrites
    assert fused.folded is (True if path == "folded" else None)
    for j, m in enumerate(lone):
        state = fused.job_state_dict(j)
        for name, value in m.state_dict().items():
            if value.is_floating_point():
                assert relative(state[name], value) <= tolerance, (j, name)
            else:
                assert torch.equal(state[name], value), (j, name)


@pytest.mark.parametrize("path", ["per-job", "folded"])
@pytest.mark.parametrize("kernels", [True, False], ids=["fused-kernels", "foreach"])
@pytest.mark.parametrize("algorithm", ["adam", "sgd"])
def test_a_diverging_job_stops_alone_and_the_others_go_on(
    algorithm: str, kernels: bool, path: str
) -> None:
    torch.manual_seed(0)
    lone = [mlp(False).double() for _ in range(K)]
    fused = FusedModel(lone)
    hparams = [{"lr": 1e-2, **({"momentum": 0.9} if algorithm == "sgd" else {})}] * K
    opt = FusedOptimizer(fused.parameters(), algorithm, hparams, kernels=kernels)
    reference = FusedModel(lone)
    reference_opt = FusedOptimizer(reference.parameters(), algorithm, hparams, kernels=kernels)
    g = torch.Generator().manual_seed(1)
    before: dict[str, torch.Tensor] = {}
    for step in range(6):
        xs = torch.randn(K, 8, 12, generator=g, dtype=torch.float64)
        ys = torch.randint(0, 4, (K, 8), generator=g)
        poisoned = xs.clone()
        if step >= 3:
            poisoned[1] = float("nan")  # job 1 diverges from step 3 on
        if step == 3:
            before = fused.job_state_dict(1)
        for model, o, x in ((fused, opt, poisoned), (reference, reference_opt, xs)):
            o.zero_grad()
            fused_loss(model, path, (x, ys)).backward()
            o.step()
    assert opt.skipped.tolist() == [0, 3, 0]
    for name, value in fused.job_state_dict(1).items():
        assert torch.equal(value, before[name]), name  # job 1 frozen where it diverged
    for j in (0, 2):
        for name, value in fused.job_state_dict(j).items():
            assert torch.equal(value, reference.job_state_dict(j)[name]), (j, name)


def test_fuse_builds_a_workload_that_steps_k_independent_jobs() -> None:
    base = Workload(
        name="mlp",
        model=lambda: mlp(True),
        batch=lambda n: (torch.randn(n, 12), torch.randint(0, 4, (n,))),
        loss=loss_of,
        optimizer=lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
        batch_size=8,
    )
    fused = fuse(base, 4, hparams=[{"lr": lr} for lr in (0.1, 0.05, 0.02, 0.01)])
    assert fused.name == "mlp+fuse4"
    torch.manual_seed(0)
    prepared = prepare(fused, StepSettings())
    model = prepared.model
    assert isinstance(model, FusedModel) and model.k == 4
    x, _ = prepared.batch
    assert x.shape == (4, 8, 12) and not torch.equal(x[0], x[1])  # a batch a job
    # Independent initialisations, as 4 separate jobs would have.
    firsts = [model.job_state_dict(j)["0.weight"] for j in range(4)]
    assert all(not torch.equal(firsts[0], w) for w in firsts[1:])
    prepared.step()
    optimizer = prepared.optimizer
    assert isinstance(optimizer, FusedOptimizer)
    assert optimizer.job_hparams(2)["lr"] == pytest.approx(0.02)
    assert optimizer.job_hparams(2)["momentum"] == pytest.approx(0.9)
    job = model.job(3)
    assert isinstance(job, nn.Sequential)
    assert torch.equal(job[0].weight, model.job_state_dict(3)["0.weight"])
    shared = fuse(base, 2, shared_batch=True)
    xs, _ = shared.batch(8)
    assert xs.shape == (2, 8, 12) and torch.equal(xs[0], xs[1])


def test_fusion_refuses_what_it_cannot_fuse() -> None:
    base = Workload(
        name="mlp",
        model=lambda: mlp(False),
        batch=lambda n: torch.randn(n, 12),
        loss=lambda m, b: m(b).sum(),
        optimizer=lambda p: torch.optim.RMSprop(p),
    )
    with pytest.raises(ConfigError, match="RMSprop has no fused form"):
        fuse(base, 2)
    adam = Workload(name="m", model=base.model, batch=base.batch, loss=base.loss)
    with pytest.raises(ConfigError, match="adamw has no hyper-parameter momentum"):
        fuse(adam, 2, hparams=[{"momentum": 0.9}, {}])
    with pytest.raises(ConfigError, match="2 sets of hyper-parameters for 3 jobs"):
        fuse(adam, 3, hparams=[{}, {}])
    with pytest.raises(ConfigError, match="at least 1"):
        fuse(adam, 0)


def test_seeded_dropout_drops_its_share_with_masks_of_its_own() -> None:
    x = torch.ones(200_000, dtype=torch.float64)
    a, b = SeededDropout(0.3, seed=1), SeededDropout(0.3, seed=2)
    first, second, other = a(x), a(x), b(x)
    dropped = float((first == 0).double().mean())
    assert abs(dropped - 0.3) < 0.005
    assert float(first.sum()) == pytest.approx(float(x.sum()), rel=0.01)  # scaled by 1/(1-p)
    assert not torch.equal(first, second) and not torch.equal(first, other)
    again = SeededDropout(0.3, seed=1)
    assert torch.equal(again(x), first) and int(a.calls) == 2
    assert torch.equal(a.eval()(x), x)
    with_dropout = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.1), nn.Sequential(nn.Dropout(0.2)))
    assert seeded_dropout(with_dropout, seed=5) == 2
    assert [int(m.seed) for m in with_dropout.modules() if isinstance(m, SeededDropout)] == [5, 6]


def test_dropping_jobs_leaves_the_others_as_they_would_have_gone() -> None:
    torch.manual_seed(0)
    lone = [mlp(True, 0.2).double() for _ in range(K)]
    for j, m in enumerate(lone):
        seeded_dropout(m, seed=j)
    full = FusedModel(lone)
    full_opt = FusedOptimizer(full.parameters(), "sgd", [{"lr": 0.1, "momentum": 0.9}] * K)
    g = torch.Generator().manual_seed(1)
    batches = [
        (
            torch.randn(K, 8, 12, generator=g, dtype=torch.float64),
            torch.randint(0, 4, (K, 8), generator=g),
        )
        for _ in range(8)
    ]
    small, small_opt = full, full_opt
    for step, (xs, ys) in enumerate(batches):
        if step == 4:
            small, small_opt = drop_jobs(full, full_opt, [1])
            full = FusedModel([full.job(j) for j in range(K)])  # the reference goes on apart
            reference_opt = FusedOptimizer(
                full.parameters(), "sgd", [{"lr": 0.1, "momentum": 0.9}] * K
            )
            for old, new in zip(full_opt.param_groups[0]["params"], full.parameters(), strict=True):
                reference_opt.state[new] = dict(full_opt.state[old])
            full_opt = reference_opt
        runs = [(full, full_opt, xs, ys)]
        if step >= 4:
            runs.append((small, small_opt, xs[[0, 2]], ys[[0, 2]]))
        for model, opt, x, y in runs:
            opt.zero_grad()
            model.per_job(loss_of, (x, y)).sum().backward()
            opt.step()
    assert small.k == 2
    for mine, theirs in ((0, 0), (1, 2)):
        for name, value in small.job_state_dict(mine).items():
            expected = full.job_state_dict(theirs)[name]
            if value.is_floating_point():
                assert relative(value, expected) <= 1e-12, (mine, name)
            else:
                assert torch.equal(value, expected), (mine, name)
    with pytest.raises(ConfigError, match="leaves nothing to train"):
        drop_jobs(small, small_opt, [0, 1])


def test_each_job_follows_its_own_learning_rate_schedule() -> None:
    torch.manual_seed(0)
    lone = [mlp(False).double() for _ in range(2)]
    fused = FusedModel(lone)
    fused_opt = FusedOptimizer(fused.parameters(), "adamw", [{"lr": 1e-2}, {"lr": 3e-3}])
    lone_opts = [
        torch.optim.AdamW(m.parameters(), lr=lr) for m, lr in zip(lone, (1e-2, 3e-3), strict=True)
    ]
    g = torch.Generator().manual_seed(1)
    for step in range(10):
        rates = [1e-2 * 0.9**step, 3e-3 * (1 if step < 5 else 0.1)]
        fused_opt.set_hparam("lr", rates)
        xs = torch.randn(2, 8, 12, generator=g, dtype=torch.float64)
        ys = torch.randint(0, 4, (2, 8), generator=g)
        fused_opt.zero_grad()
        fused.per_job(loss_of, (xs, ys)).sum().backward()
        fused_opt.step()
        for j, (m, opt) in enumerate(zip(lone, lone_opts, strict=True)):
            opt.param_groups[0]["lr"] = rates[j]
            opt.zero_grad()
            loss_of(m, (xs[j], ys[j])).backward()
            opt.step()
    for j, m in enumerate(lone):
        for name, value in m.state_dict().items():
            assert relative(fused.job_state_dict(j)[name], value) <= 1e-10, (j, name)
    with pytest.raises(ConfigError, match="3 values for 2 jobs"):
        fused_opt.set_hparam("lr", [1.0, 2.0, 3.0])


class TiedLM(nn.Module):
    """A language model whose output head is its embedding (as GPT-2's)."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(10, 8)
        self.mix = nn.Linear(8, 8)
        self.head = nn.Linear(8, 10, bias=False)
        self.head.weight = self.embedding.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.mix(self.embedding(tokens))))


@pytest.mark.parametrize("path", ["per-job", "folded"])
def test_tied_weights_stay_tied_fused_and_out_again(path: str) -> None:
    def lm_loss(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(
            model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten()
        )

    torch.manual_seed(0)
    lone = [TiedLM().double() for _ in range(2)]
    fused = FusedModel(lone)
    fused_opt = FusedOptimizer(fused.parameters(), "adam", [{"lr": 1e-2}, {"lr": 1e-3}])
    lone_opts = [
        torch.optim.Adam(m.parameters(), lr=lr) for m, lr in zip(lone, (1e-2, 1e-3), strict=True)
    ]
    g = torch.Generator().manual_seed(1)
    for _ in range(STEPS):
        tokens = torch.randint(0, 10, (2, 4, 6), generator=g)
        fused_opt.zero_grad()
        if path == "per-job":
            fused.per_job(lm_loss, tokens).sum().backward()
        else:
            fused.loss(lm_loss, tokens).backward()
        fused_opt.step()
        for j, (m, opt) in enumerate(zip(lone, lone_opts, strict=True)):
            opt.zero_grad()
            lm_loss(m, tokens[j]).backward()
            opt.step()
    # Not an nn.Sequential: the model runs under vmap, folded or not.
    assert not fused.direct and fused.folded is (True if path == "folded" else None)
    for j, m in enumerate(lone):
        job = fused.job(j)
        assert isinstance(job, TiedLM) and job.head.weight is job.embedding.weight
        for name, value in m.state_dict().items():
            assert relative(job.state_dict()[name], value) <= 1e-10, (j, name)


def test_each_job_has_a_loss_scale_of_its_own() -> None:
    from lightspeed.optimize.fusion.optimizer import JobLossScaler

    torch.manual_seed(0)
    lone = [mlp(False) for _ in range(K)]
    scaled, plain = FusedModel(lone), FusedModel(lone)
    opt = FusedOptimizer(scaled.parameters(), "adam", [{"lr": 1e-2}] * K)
    plain_opt = FusedOptimizer(plain.parameters(), "adam", [{"lr": 1e-2}] * K)
    scaler = JobLossScaler(K, init_scale=2.0**10, growth_interval=2)
    scaler.scales[1] = float("inf")  # job 1's scaled gradients are never finite
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        xs, ys = torch.randn(K, 8, 12, generator=g), torch.randint(0, 4, (K, 8), generator=g)
        opt.zero_grad()
        scaler.scale(scaled.per_job(loss_of, (xs, ys))).backward()
        scaler.step(opt)
        scaler.update(opt)
        plain_opt.zero_grad()
        plain.per_job(loss_of, (xs, ys)).sum().backward()
        plain_opt.step()
    # Job 1 never stepped; the others grew after 2 finite steps, and, scaled by powers
    # of 2, stepped bit for bit as unscaled.
    assert opt.skipped.tolist() == [0, 3, 0]
    assert scaler.scales.tolist() == [2.0**11, float("inf"), 2.0**11]
    for j in (0, 2):
        for name, value in scaled.job_state_dict(j).items():
            assert torch.equal(value, plain.job_state_dict(j)[name]), (j, name)
    assert all(torch.equal(v, lone[1].state_dict()[n]) for n, v in scaled.job_state_dict(1).items())


def test_a_loss_scale_backs_off_on_overflow_and_grows_after_an_interval() -> None:
    from lightspeed.optimize.fusion.optimizer import JobLossScaler

    opt = FusedOptimizer([nn.Parameter(torch.zeros(2, 3))], "sgd", [{}, {}])
    scaler = JobLossScaler(2, init_scale=8.0, growth_interval=3)
    for finite in ([True, False], [True, True], [True, True], [False, True]):
        opt.last_finite = torch.tensor(finite)
        scaler.update(opt)
    # Job 0: 3 finite steps, grown to 16, then an overflow: 8. Job 1: backed off to 4,
    # then 3 finite steps: 8.
    assert scaler.scales.tolist() == [8.0, 8.0]
    with pytest.raises(ConfigError, match="grows by a factor above 1"):
        JobLossScaler(2, growth_factor=1.0)


def test_an_op_vmap_runs_job_by_job_is_reported_and_other_warnings_pass_through(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import warnings

    from lightspeed.optimize.fusion.fuse import report_fallbacks

    text = (
        "There is a performance drop because we have not yet implemented the batching rule"
        " for aten::_scaled_dot_product_flash_attention_for_cpu. Please file us an issue."
    )
    records = [
        warnings.WarningMessage(UserWarning(text), UserWarning, "gpt2.py", 56),
        warnings.WarningMessage(UserWarning("something else"), UserWarning, "model.py", 3),
        warnings.WarningMessage(UserWarning(text), UserWarning, "gpt2.py", 56),  # layer 2
    ]
    with warnings.catch_warnings(record=True) as again, caplog.at_level("WARNING", "lightspeed"):
        warnings.simplefilter("always")
        ops = report_fallbacks(records)
        # PyTorch's own warning, said once as the report's line, is not said again raw.
        warnings.warn(text, UserWarning, stacklevel=1)
    assert ops == ["aten::_scaled_dot_product_flash_attention_for_cpu"]
    assert [str(w.message) for w in again] == ["something else"]
    assert caplog.text.count("no batching rule for aten::_scaled_dot_product_flash_") == 1


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_a_job_taken_out_with_its_optimizer_state_goes_on_as_it_would_have_fused(
    algorithm: str,
) -> None:
    from lightspeed.optimize.fusion.fuse import job_optimizer

    _, hparams = ALGORITHMS[algorithm]
    torch.manual_seed(0)
    fused = FusedModel([mlp(False).double() for _ in range(K)])
    kind = {"sgd-momentum": "sgd"}.get(algorithm, algorithm)
    opt = FusedOptimizer(fused.parameters(), kind, [fused_names(h) for h in hparams])
    g = torch.Generator().manual_seed(1)
    batches = [
        (
            torch.randn(K, 8, 12, generator=g, dtype=torch.float64),
            torch.randint(0, 4, (K, 8), generator=g),
        )
        for _ in range(8)
    ]
    for xs, ys in batches[:4]:
        opt.zero_grad()
        fused.per_job(loss_of, (xs, ys)).sum().backward()
        opt.step()
    jobs = [fused.job(j) for j in range(K)]
    lone_opts = [job_optimizer(fused, opt, j, m) for j, m in enumerate(jobs)]
    # The job's optimizer state is an ordinary state_dict that torch's optimizer loads.
    again = type(lone_opts[0])(jobs[0].parameters())
    again.load_state_dict(lone_opts[0].state_dict())
    for xs, ys in batches[4:]:
        opt.zero_grad()
        fused.per_job(loss_of, (xs, ys)).sum().backward()
        opt.step()
        for j, (m, o) in enumerate(zip(jobs, lone_opts, strict=True)):
            o.zero_grad()
            loss_of(m, (xs[j], ys[j])).backward()
            o.step()
    for j, m in enumerate(jobs):
        state = fused.job_state_dict(j)
        for name, value in m.state_dict().items():
            assert relative(value, state[name]) <= 1e-10, (j, name)


def test_the_layer_rewrites_compute_what_vmap_computes() -> None:
    def net() -> nn.Module:
        return nn.Sequential(
            nn.Linear(6, 8),
            nn.BatchNorm1d(5),  # on [B, 5, 8]: five channels, statistics over B and 8
            nn.GELU(),
            nn.Sequential(nn.LayerNorm(8), SeededDropout(0.25, seed=3), nn.Tanh()),
            nn.Flatten(),
            nn.Linear(40, 3, bias=False),
        ).double()

    torch.manual_seed(0)
    lone = [net() for _ in range(K)]
    for j, m in enumerate(lone):
        seeded_dropout(m, seed=j)
        for module in m.modules():
            if isinstance(module, SeededDropout):
                module.seed.fill_(10 + j)
    direct, under_vmap = FusedModel(lone), FusedModel(lone)
    assert direct.direct
    x = torch.randn(K, 4, 5, 6, dtype=torch.float64)
    for _ in range(2):  # the second pass sees the first one's running statistics
        got = direct(x)
        want = under_vmap.per_job(lambda model, a: model(a), x)
        assert got.shape == (K, 4, 3)
        assert relative(got, want) <= 1e-12
        (g,) = torch.autograd.grad(got.square().sum(), [direct.p0])
        (w,) = torch.autograd.grad(want.square().sum(), [under_vmap.p0])
        assert relative(g, w) <= 1e-12
    for name, buffer in direct.named_buffers():
        assert torch.equal(buffer, dict(under_vmap.named_buffers())[name]) or (
            relative(buffer, dict(under_vmap.named_buffers())[name]) <= 1e-12
        ), name
    eval_direct, eval_vmap = direct.eval()(x), under_vmap.eval().per_job(lambda m, a: m(a), x)
    assert relative(eval_direct, eval_vmap) <= 1e-12
    assert not FusedModel([nn.Sequential(nn.Linear(2, 2), nn.Softmax(dim=1))]).direct


@pytest.mark.parametrize(
    "name, loss, folds",
    [
        # Mean and sum over samples: each job's loss and gradient from one batch of K × B.
        ("mean", loss_of, True),
        ("sum", lambda m, b: nn.functional.cross_entropy(m(b[0]), b[1], reduction="sum"), True),
        # The batch's own spread: its samples are not independent terms.
        ("spread", lambda m, b: m(b[0]).std(), False),
        # A mean over the labels not ignored: each job's count is its own.
        (
            "ignored",
            lambda m, b: nn.functional.cross_entropy(m(b[0]), b[1], ignore_index=0),
            False,
        ),
    ],
)
def test_the_loss_folds_only_where_it_equals_the_jobs_own(
    name: str, loss: Callable[..., torch.Tensor], folds: bool
) -> None:
    torch.manual_seed(0)
    lone = [mlp(False).double() for _ in range(K)]
    fused, reference = FusedModel(lone), FusedModel(lone)
    g = torch.Generator().manual_seed(1)
    xs = torch.randn(K, 8, 12, generator=g, dtype=torch.float64)
    ys = torch.randint(0, 4, (K, 8), generator=g)
    ys[0, :5] = 0  # job 0 ignores more labels than the others
    for _ in range(2):  # the check, then the path it chose
        got = fused.loss(loss, (xs, ys))
        want = reference.per_job(loss, (xs, ys)).sum()
        assert float(got.detach()) == pytest.approx(float(want.detach()), rel=1e-12), name
        got_grads = torch.autograd.grad(got, list(fused.parameters()))
        want_grads = torch.autograd.grad(want, list(reference.parameters()))
        for a, b in zip(got_grads, want_grads, strict=True):
            assert relative(a, b) <= 1e-10, name
    assert fused.folded is folds, name


def test_the_losss_check_leaves_random_state_and_buffers_as_one_call_would() -> None:
    torch.manual_seed(0)
    lone = [nn.Sequential(nn.Linear(12, 16), nn.BatchNorm1d(16), nn.Dropout(0.5), nn.Linear(16, 4))]
    fused, reference = FusedModel(lone * 2), FusedModel(lone * 2)
    assert not fused.direct  # torch's own dropout: vmap draws its masks
    x, y = torch.randn(2, 8, 12), torch.randint(0, 4, (2, 8))
    torch.manual_seed(5)
    fused.loss(loss_of, (x, y))
    after = torch.rand(())
    torch.manual_seed(5)
    reference.per_job(loss_of, (x, y))
    assert torch.equal(torch.rand(()), after)
    for (name, got), want in zip(fused.named_buffers(), reference.buffers(), strict=True):
        assert torch.equal(got, want), name


def test_a_fused_step_counts_every_jobs_samples() -> None:
    from lightspeed.facts.timing import StepTiming
    from lightspeed.measure.timer import TimerConfig
    from lightspeed.measure.workload_timing import time_workload
    from lightspeed.report.timing_report import timing_document, workload_line

    one = Workload(
        name="small",
        model=lambda: nn.Linear(4, 2),
        batch=lambda n: torch.ones(n, 4),
        loss=lambda m, b: m(b).square().mean(),
        batch_size=3,
        tokens_per_sample=5,
    )
    fused = fuse(one, k=8)
    assert fused.jobs == 8
    timing: StepTiming = time_workload(fused, config=TimerConfig(budget_s=0.05))
    assert timing.workload.jobs == 8 and timing.workload.samples_per_step == 24
    step = timing.measurement
    # 8 jobs of 3 samples a step, 5 tokens each.
    assert timing.samples_per_s == pytest.approx(24 / step.mean_s, rel=1e-9)
    assert timing.tokens_per_s == pytest.approx(5 * timing.samples_per_s)
    said = "".join(str(s) for s in workload_line(timing.workload))
    assert "8 jobs of batch 3" in said
    assert timing_document(timing, None).data["workload"]["jobs"] == 8
