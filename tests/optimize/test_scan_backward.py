"""BPPSA: an nn.RNN's backward as a parallel scan, against autograd's own."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from factories import rnn_tagger_workload
from lightspeed.errors import ConfigError
from lightspeed.facts.device import Device
from lightspeed.hardware.calibrate import tf32_mode
from lightspeed.optimize import scan_backward
from lightspeed.optimize.bppsa import scan_hidden_gradients
from lightspeed.predict.scan import autograd_ops, scan_levels, scan_ops


def _relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).norm() / want.norm())


def _gradients(
    module: nn.Module, x: torch.Tensor, h0: torch.Tensor | None, loss: str
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    x = x.detach().clone().requires_grad_()
    h = None if h0 is None else h0.detach().clone().requires_grad_()
    out, h_n = module(x, h)
    value = {"every": (out * out).sum(), "last": h_n.sum(), "both": out.sum() + 3 * h_n.sum()}
    value[loss].backward()
    wanted = [x.grad] + ([] if h is None else [h.grad]) + [p.grad for p in module.parameters()]
    return out, [g for g in wanted if g is not None]


def _compare(rnn: nn.Module, x: torch.Tensor, h0: torch.Tensor | None, loss: str) -> float:
    rnn.zero_grad(set_to_none=True)
    scanned = scan_backward(copy.deepcopy(rnn))
    out, want = _gradients(rnn, x, h0, loss)
    out_scanned, got = _gradients(scanned, x, h0, loss)
    assert torch.equal(out, out_scanned), "the forward is the module's own"
    assert len(got) == len(want)
    return max(_relative(g, w) for g, w in zip(got, want, strict=True))


@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("loss", ["every", "last", "both"])
def test_gradients_equal_autograds_in_fp64(
    nonlinearity: str, batch_first: bool, bias: bool, loss: str
) -> None:
    torch.manual_seed(0)
    for steps in (1, 2, 3, 8, 33):
        rnn = nn.RNN(5, 6, nonlinearity=nonlinearity, batch_first=batch_first, bias=bias)
        rnn = rnn.double()
        shape = (3, steps, 5) if batch_first else (steps, 3, 5)
        x = torch.randn(shape, dtype=torch.float64)
        h0 = torch.randn(1, 3, 6, dtype=torch.float64)
        assert _compare(rnn, x, h0, loss) < 1e-12, steps


def test_ten_thousand_steps_in_fp64_and_a_thousand_in_fp32() -> None:
    torch.manual_seed(1)
    rnn = nn.RNN(3, 4).double()
    assert _compare(rnn, torch.randn(10_000, 2, 3, dtype=torch.float64), None, "every") < 1e-10
    assert _compare(rnn, torch.randn(10_000, 2, 3, dtype=torch.float64), None, "last") < 1e-10
    # fp32 with a contracting recurrence (spectral radius of W_hh below 1).
    rnn = nn.RNN(3, 8)
    with torch.no_grad():
        rnn.weight_hh_l0.mul_(0.9 / torch.linalg.eigvals(rnn.weight_hh_l0).abs().max())
    assert _compare(rnn, torch.randn(1_000, 2, 3), None, "every") < 1e-4
    assert _compare(rnn, torch.randn(1_000, 2, 3), None, "last") < 1e-4


def test_unbatched_input_and_no_initial_state() -> None:
    torch.manual_seed(2)
    rnn = nn.RNN(4, 5, batch_first=True).double()
    assert _compare(rnn, torch.randn(20, 4, dtype=torch.float64), None, "both") < 1e-12
    h0 = torch.randn(1, 5, dtype=torch.float64)
    assert _compare(rnn, torch.randn(20, 4, dtype=torch.float64), h0, "both") < 1e-12


class _Products(TorchDispatchMode):
    """Counts the batched products run inside it, and every op (`dispatched`)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.dispatched = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.dispatched += 1
        if func in (torch.ops.aten.bmm.default, torch.ops.aten.mm.default):
            self.count += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("steps", [1, 2, 3, 4, 7, 8, 100, 1000])
def test_levels_are_logarithmic_in_the_steps(steps: int) -> None:
    """The scan's depth: 2⌈log₂(T + 1)⌉ levels, each a fixed number of batched products
    over every position at once (two in the up-sweep, one in the down-sweep), however
    long the sequence."""
    jacobians = torch.randn(steps, 2, 3, 3, dtype=torch.float64) * 0.3
    seeds = torch.randn(steps, 2, 3, dtype=torch.float64)
    with _Products() as products:
        grads, stats = scan_hidden_gradients(jacobians, seeds)
    assert stats.levels == scan_levels(steps) == 2 * math.ceil(math.log2(steps + 1))
    assert products.count == 3 * stats.levels // 2 + 1  # and one for the initial state
    # The recurrence solved step by step, for the values themselves.
    g = seeds[-1]
    want = [g]
    for t in range(steps - 1, 0, -1):
        g = (jacobians[t] @ g.unsqueeze(-1)).squeeze(-1) + seeds[t - 1]
        want.append(g)
    want.append((jacobians[0] @ g.unsqueeze(-1)).squeeze(-1))
    torch.testing.assert_close(grads, torch.stack(want[::-1]), rtol=1e-12, atol=1e-12)


def test_runs_plainly_without_gradients() -> None:
    rnn = scan_backward(nn.RNN(3, 4))
    with torch.no_grad():
        out, _ = rnn(torch.randn(5, 2, 3))
    assert out.grad_fn is None


@pytest.mark.parametrize(
    ("module", "message"),
    [
        (nn.LSTM(3, 4), "has no nn.RNN (it has LSTM"),
        (nn.RNN(3, 4, num_layers=2), "2 layers"),
        (nn.RNN(3, 4, bidirectional=True), "bidirectional"),
        (nn.Linear(3, 4), "has no nn.RNN;"),
    ],
)
def test_refusals(module: nn.Module, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        scan_backward(module)


def test_refuses_twice_and_packed_sequences() -> None:
    rnn = scan_backward(nn.RNN(3, 4))
    with pytest.raises(ConfigError, match="scanned already"):
        scan_backward(rnn)
    packed = nn.utils.rnn.pack_sequence([torch.randn(4, 3), torch.randn(2, 3)])
    with pytest.raises(ConfigError, match="packed sequences"):
        rnn(packed)
    with pytest.raises(ConfigError, match=r"Workload or an nn\.Module"):
        scan_backward("rnn")  # type: ignore[arg-type]


def test_a_workload_trains_the_same() -> None:
    workload = rnn_tagger_workload()
    scanned = scan_backward(workload)
    assert scanned.name == "rnn-tagger+scan-backward"
    torch.manual_seed(3)
    plain_model = workload.model()
    torch.manual_seed(3)
    scanned_model = scanned.model()
    assert plain_model.state_dict().keys() == scanned_model.state_dict().keys()
    batch = workload.batch(workload.batch_size)
    for model in (plain_model, scanned_model):
        workload.loss(model, batch).backward()
    for p, q in zip(plain_model.parameters(), scanned_model.parameters(), strict=True):
        assert _relative(q.grad, p.grad) < 1e-5


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_gradients_equal_cudnns() -> None:
    torch.manual_seed(2)
    # fp64 runs the native recurrence, fp32 cuDNN's; the scan's products are cuBLAS's.
    rnn = nn.RNN(3, 8).double().cuda()
    x = torch.randn(4_000, 2, 3, dtype=torch.float64, device="cuda")
    assert _compare(rnn, x, None, "both") < 1e-10
    rnn = nn.RNN(3, 8).cuda()
    with torch.no_grad():
        rnn.weight_hh_l0.mul_(0.9 / torch.linalg.eigvals(rnn.weight_hh_l0.cpu()).abs().max())
    # cuDNN's recurrence may run on TF32 otherwise, too coarse to be the reference.
    with tf32_mode(Device.CUDA, enabled=False):
        assert _compare(rnn, torch.randn(1_000, 2, 3, device="cuda"), None, "every") < 1e-4


@pytest.mark.parametrize("steps", [2, 3, 100, 1000])
def test_the_predictions_op_counts_are_what_each_backward_dispatches(steps: int) -> None:
    # predict.scan charges every dispatched op one op's overhead: its counts must be the
    # ones the pinned torch and this scan dispatch (a bias, a loss at every step).
    for scanned, expected in ((False, autograd_ops(steps)), (True, scan_ops(steps))):
        rnn = nn.RNN(8, 16)
        module = scan_backward(rnn) if scanned else rnn
        out, _ = module(torch.randn(steps, 4, 8))
        loss = out.sum()
        counter = _Products()
        with counter:
            loss.backward()
        assert counter.dispatched == expected, (scanned, steps)
