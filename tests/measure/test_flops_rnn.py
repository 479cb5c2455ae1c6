"""Recurrent layers: lightspeed's counts against torch's counter on the same network unrolled.

A fused layer (oneDNN's LSTM on the CPU, cuDNN's on CUDA) must count what
torch.utils.flop_counter counts for its twin built from nn.LSTMCell / nn.GRUCell /
nn.RNNCell steps sharing its weights (flops_rnn's convention). The layers the CPU
decomposes into addmm/mm are checked the same way, through `lightspeed profile`'s own
capture. The CUDA-only kernels cannot run here: they are costed with `op_cost` on the
arguments and outputs their schemas take, built from a real module's weights.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from lightspeed import Workload
from lightspeed.facts.records import OpRecord, Phase
from lightspeed.measure.capture import capture_forward, capture_step
from lightspeed.measure.costs.op_cost import OpCost, known_flops, op_cost
from lightspeed.measure.step import StepSettings, prepare

pytestmark = pytest.mark.filterwarnings("ignore:LSTM with projections is not supported")

aten = torch.ops.aten
FP32 = 4  # bytes per float32 element
VOCAB, EMBED, HIDDEN, SEQ, BATCH = 40, 16, 24, 10, 3


@dataclasses.dataclass(frozen=True)
class Config:
    """An nn.RNN / nn.LSTM / nn.GRU of 2 layers and the ops it runs on the CPU."""

    kind: type[nn.RNNBase]
    options: dict[str, Any]
    fused: bool  # runs as one oneDNN kernel per layer and direction

    def rnn(self) -> nn.RNNBase:
        return stacked(self.kind, **self.options)


def stacked(kind: type[nn.RNNBase], **options: Any) -> nn.RNNBase:
    """Two layers of `kind`, EMBED inputs, HIDDEN units."""
    return kind(EMBED, HIDDEN, num_layers=2, **options)


CONFIGS = {
    "lstm": Config(nn.LSTM, {}, fused=True),
    "lstm-bidirectional": Config(nn.LSTM, {"bidirectional": True}, fused=True),
    "lstm-batch-first-no-bias": Config(nn.LSTM, {"batch_first": True, "bias": False}, True),
    "lstm-proj": Config(nn.LSTM, {"proj_size": 8}, fused=False),  # oneDNN has no projections
    "gru": Config(nn.GRU, {}, fused=False),
    "gru-bidirectional-batch-first": Config(
        nn.GRU, {"bidirectional": True, "batch_first": True}, fused=False
    ),
    "rnn-tanh": Config(nn.RNN, {}, fused=False),
    "rnn-relu-bidirectional": Config(
        nn.RNN, {"nonlinearity": "relu", "bidirectional": True}, fused=False
    ),
}


class LanguageModel(nn.Module):
    """Embedding → recurrent layers → Linear to the vocabulary."""

    def __init__(self, rnn: nn.Module, rnn_width: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, EMBED)
        self.rnn = rnn
        self.head = nn.Linear(rnn_width, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(self.embed(tokens))[0])


def output_width(rnn: nn.RNNBase) -> int:
    directions = 2 if rnn.bidirectional else 1
    return directions * (rnn.proj_size or rnn.hidden_size)


def language_model(config: Config) -> Workload:
    batch_first = config.options.get("batch_first", False)

    def model() -> nn.Module:
        torch.manual_seed(0)
        rnn = config.rnn()
        return LanguageModel(rnn, output_width(rnn))

    def batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(1)
        shape = (n, SEQ) if batch_first else (SEQ, n)
        return torch.randint(0, VOCAB, shape, generator=g), torch.randint(
            0, VOCAB, shape, generator=g
        )

    def loss(model: nn.Module, b: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return F.cross_entropy(model(b[0]).flatten(0, 1), b[1].flatten())

    return Workload(name="lm", model=model, batch=batch, loss=loss, batch_size=BATCH)


# --- the unrolled twin --------------------------------------------------------------


class ProjectedLSTMCell(nn.Module):
    """One step of an LSTM with projections (nn.LSTMCell has none): h' = W_hr·(o·tanh c')."""

    def __init__(self, rnn: nn.LSTM, suffix: str) -> None:
        super().__init__()
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr"):
            setattr(self, name, getattr(rnn, f"{name}{suffix}", None))

    def forward(
        self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        h, c = state
        gates = F.linear(x, self.weight_ih, self.bias_ih) + F.linear(
            h, self.weight_hh, self.bias_hh
        )
        i, f, g, o = gates.chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return F.linear(torch.sigmoid(o) * torch.tanh(c), self.weight_hr), c


def step_cell(rnn: nn.RNNBase, layer: int, reverse: bool) -> nn.Module:
    """The cell of one layer and direction of `rnn`, sharing its parameters."""
    suffix = f"_l{layer}" + ("_reverse" if reverse else "")
    if isinstance(rnn, nn.LSTM) and rnn.proj_size:
        return ProjectedLSTMCell(rnn, suffix)
    weight_ih = getattr(rnn, f"weight_ih{suffix}")
    sizes = (weight_ih.shape[1], rnn.hidden_size)
    cell: nn.RNNCellBase
    if isinstance(rnn, nn.LSTM):
        cell = nn.LSTMCell(*sizes, bias=rnn.bias)
    elif isinstance(rnn, nn.GRU):
        cell = nn.GRUCell(*sizes, bias=rnn.bias)
    else:
        cell = nn.RNNCell(*sizes, bias=rnn.bias, nonlinearity=rnn.nonlinearity)
    names = ("weight_ih", "weight_hh") + (("bias_ih", "bias_hh") if rnn.bias else ())
    for name in names:
        setattr(cell, name, getattr(rnn, f"{name}{suffix}"))
    return cell


class Unrolled(nn.Module):
    """`rnn` run one cell step at a time, over time, layers and directions.

    `state_grad` gives the zero initial states `requires_grad`, so that the twin also
    computes their gradient, as the fused kernels do whether autograd needs it or not.
    """

    def __init__(self, rnn: nn.RNNBase, state_grad: bool) -> None:
        super().__init__()
        self.rnn = rnn
        self.state_grad = state_grad
        directions = (False, True) if rnn.bidirectional else (False,)
        self.cells = nn.ModuleList(
            step_cell(rnn, layer, reverse)
            for layer in range(rnn.num_layers)
            for reverse in directions
        )

    def _initial_state(self, batch: int) -> Any:
        rnn = self.rnn
        h = torch.zeros(batch, rnn.proj_size or rnn.hidden_size, requires_grad=self.state_grad)
        if not isinstance(rnn, nn.LSTM):
            return h
        return h, torch.zeros(batch, rnn.hidden_size, requires_grad=self.state_grad)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rnn = self.rnn
        if rnn.batch_first:
            x = x.transpose(0, 1)
        steps, batch = x.shape[:2]
        directions = 2 if rnn.bidirectional else 1
        for layer in range(rnn.num_layers):
            outputs = []
            for direction in range(directions):
                cell = self.cells[layer * directions + direction]
                state = self._initial_state(batch)
                hidden = []
                for t in reversed(range(steps)) if direction else range(steps):
                    state = cell(x[t], state)
                    hidden.append(state[0] if isinstance(state, tuple) else state)
                outputs.append(torch.stack(hidden[::-1] if direction else hidden))
            x = torch.cat(outputs, dim=-1)
        return x.transpose(0, 1) if rnn.batch_first else x


def torch_counts(twin: nn.Module, x: torch.Tensor, grad: torch.Tensor) -> tuple[int, int]:
    """(forward, backward) FLOPs torch's counter counts for `twin` on `x`."""
    x = x.detach().requires_grad_()  # in the language model it is the embedding's output
    with FlopCounterMode(display=False) as forward:
        y = twin(x)
    with FlopCounterMode(display=False) as backward:
        y.backward(grad)
    return forward.get_total_flops(), backward.get_total_flops()


def matmul_flops(ops: list[OpRecord], phase: Phase) -> int:
    """The matmul-class FLOPs of `ops` in `phase`: what torch's counter counts."""
    return sum(op.flops for op in ops if op.phase is phase and op.macs is not None)


@pytest.mark.parametrize("name", CONFIGS)
def test_recurrent_layer_counts_what_torch_counts_for_its_unrolled_twin(name: str) -> None:
    config = CONFIGS[name]
    workload = language_model(config)
    prepared = prepare(workload, StepSettings())
    ops = [op for op in capture_step(prepared) if op.module == "rnn"]
    assert all(op.flops_known for op in ops)

    lm = workload.model()
    tokens = workload.batch(BATCH)[0]
    embedded = lm.embed(tokens).detach()
    fused_output = lm.rnn(embedded)[0]
    # oneDNN's backward computes the initial states' gradient; autograd over the
    # decomposed layers skips it, as it does in the twin when the states need none.
    twin = Unrolled(lm.rnn, state_grad=config.fused)
    torch.testing.assert_close(twin(embedded), fused_output)  # the same network
    grad = torch.randn_like(fused_output)
    torch_forward, torch_backward = torch_counts(twin, embedded, grad)

    forward = matmul_flops(ops, Phase.FORWARD)
    backward = matmul_flops(ops, Phase.BACKWARD)
    # Exactly (the bar is 1 %): the same matmuls, counted 2 FLOPs per MAC on both sides.
    assert (forward, backward) == (torch_forward, torch_backward)
    matmul_ops = {op.name for op in ops if op.macs is not None}
    if config.fused:
        assert matmul_ops == {"aten::mkldnn_rnn_layer", "aten::mkldnn_rnn_layer_backward"}
        # The kernels' backward: gradients of inputs and states, and of weights.
        assert backward == 2 * forward
    else:
        assert matmul_ops == {"aten::addmm", "aten::mm"}  # torch's own formulas


def test_lstm_language_model_step_counts_exactly() -> None:
    ops = capture_step(prepare(language_model(CONFIGS["lstm"]), StepSettings()))
    layers = [op for op in ops if op.name == "aten::mkldnn_rnn_layer"]
    # tokens T·B = 10·3 = 30; gates 4H = 96
    # layer 0: 2·30·(96·16 + 96·24) = 230,400; layer 1: 2·30·(96·24 + 96·24) = 276,480
    assert [op.flops for op in layers] == [230_400, 276_480]
    assert [op.macs for op in layers] == [115_200, 138_240]
    backward = [op.flops for op in ops if op.name == "aten::mkldnn_rnn_layer_backward"]
    assert backward == [2 * 276_480, 2 * 230_400]  # layer 1 first


def test_lstm_layer_bytes_are_its_weights_inputs_and_outputs() -> None:
    ops = capture_step(prepare(language_model(CONFIGS["lstm"]), StepSettings()))
    forward, _ = [op for op in ops if op.name == "aten::mkldnn_rnn_layer"]
    # input [10, 3, 16] 480, W_ih [96, 16] 1,536, W_hh [96, 24] 2,304, biases 2·96,
    # h0 and c0 [3, 24] 2·72
    assert forward.bytes_read == (480 + 1_536 + 2_304 + 192 + 144) * FP32
    (output, hy, cy, (workspace,)) = forward.output_shapes
    assert (output, hy, cy) == ((10, 3, 24), (3, 24), (3, 24))
    assert forward.output_dtypes[-1] == "uint8"
    # output 720, hy and cy 2·72, and oneDNN's workspace bytes, kept for the backward
    assert forward.bytes_written == (720 + 144) * FP32 + workspace
    backward = next(op for op in ops if op.name == "aten::mkldnn_rnn_layer_backward")
    # layer 1: input [10, 3, 24] 720, W_ih and W_hh 2·2,304, biases 192, hx cx hy cy
    # 4·72, output and grad_output 2·720, workspace
    assert backward.bytes_read == (720 + 4_608 + 192 + 288 + 1_440) * FP32 + workspace
    # grad input 720, weights 4,608, biases 192, hx and cx 144
    assert backward.bytes_written == (720 + 4_608 + 192 + 144) * FP32


# --- CUDA kernels, costed from the arguments their schemas take -------------------------

CUDNN_MODES = {"RNN_RELU": 0, "RNN_TANH": 1, "LSTM": 2, "GRU": 3}


@dataclasses.dataclass
class CudnnCall:
    """The arguments of `_cudnn_rnn` for an nn.RNNBase, its outputs, and its twin's counts."""

    rnn: nn.RNNBase
    x: torch.Tensor
    weights: list[torch.Tensor]
    weight_buf: torch.Tensor
    hx: torch.Tensor
    cx: torch.Tensor | None
    output: torch.Tensor

    @classmethod
    def of(cls, rnn: nn.RNNBase) -> CudnnCall:
        x = torch.randn(SEQ, BATCH, EMBED)
        # cuDNN views every weight in one flat buffer.
        params = [p.detach() for p in rnn.parameters()]  # per layer and direction, in order
        weight_buf = torch.cat([p.flatten() for p in params])
        ends = list(itertools.accumulate(p.numel() for p in params))
        weights = [
            weight_buf[end - p.numel() : end].view(p.shape)
            for p, end in zip(params, ends, strict=True)
        ]
        states = rnn.num_layers * (2 if rnn.bidirectional else 1)
        hx = torch.zeros(states, BATCH, rnn.proj_size or rnn.hidden_size)
        cx = torch.zeros(states, BATCH, rnn.hidden_size) if isinstance(rnn, nn.LSTM) else None
        output = torch.zeros(SEQ, BATCH, output_width(rnn))
        return cls(rnn, x, weights, weight_buf, hx, cx, output)

    def settings(self) -> tuple[Any, ...]:
        """The arguments both ops take after cx / grad_cy: mode, hidden_size, proj_size,
        num_layers, batch_first, dropout, train, bidirectional."""
        rnn = self.rnn
        layout = (rnn.hidden_size, rnn.proj_size, rnn.num_layers)
        return (CUDNN_MODES[rnn.mode], *layout, False, 0.0, True, rnn.bidirectional)

    def forward_cost(self) -> OpCost:
        args = (self.x, self.weights, len(self.weights) // self.hx.shape[0], self.weight_buf)
        args += (self.hx, self.cx, *self.settings(), [], None)
        reserve = torch.zeros(1000, dtype=torch.uint8)
        out = (self.output, torch.zeros_like(self.hx), self._like_cx(), reserve, self.weight_buf)
        return op_cost(aten._cudnn_rnn.default, args, {}, out)

    def backward_cost(self, weight_grads: bool = True, grads: bool = True) -> OpCost:
        grad_output = torch.zeros_like(self.output) if grads else None
        args = (self.x, self.weights, len(self.weights) // self.hx.shape[0], self.weight_buf)
        args += (self.hx, self.cx, self.output, grad_output, None, None, *self.settings(), [])
        args += (None, torch.zeros(1000, dtype=torch.uint8), [True, True, True, weight_grads])
        grad_weights = [torch.zeros_like(w) for w in self.weights] if weight_grads else []
        out = (torch.zeros_like(self.x), torch.zeros_like(self.hx), self._like_cx(), grad_weights)
        return op_cost(aten._cudnn_rnn_backward.default, args, {}, out)

    def _like_cx(self) -> torch.Tensor:
        return torch.zeros_like(self.cx) if self.cx is not None else torch.zeros(0)

    def twin_counts(self) -> tuple[int, int]:
        twin = Unrolled(self.rnn, state_grad=True)
        return torch_counts(twin, self.x, torch.randn_like(self.output))


CUDNN_CONFIGS = {
    "lstm-bidirectional": (nn.LSTM, {"bidirectional": True}),
    "lstm-proj-no-bias": (nn.LSTM, {"proj_size": 8, "bias": False}),
    "gru": (nn.GRU, {}),
    "rnn-relu-bidirectional": (nn.RNN, {"nonlinearity": "relu", "bidirectional": True}),
}


@pytest.mark.parametrize("name", CUDNN_CONFIGS)
def test_cudnn_rnn_counts_what_torch_counts_for_the_unrolled_twin(name: str) -> None:
    torch.manual_seed(0)
    kind, options = CUDNN_CONFIGS[name]
    call = CudnnCall.of(stacked(kind, **options))
    torch_forward, torch_backward = call.twin_counts()
    forward, backward = call.forward_cost(), call.backward_cost()
    assert (forward.flops, backward.flops) == (torch_forward, torch_backward)
    assert backward.flops == 2 * forward.flops and forward.macs == forward.flops // 2
    # Without weight gradients only the data pass runs; without any gradient, nothing.
    assert call.backward_cost(weight_grads=False).flops == forward.flops
    assert call.backward_cost(grads=False).flops == 0


def test_cudnn_lstm_flops_and_bytes_by_hand() -> None:
    torch.manual_seed(0)
    call = CudnnCall.of(stacked(nn.LSTM))
    cost = call.forward_cost()
    # tokens 30; layer 0: 96·16 + 96·24 = 3,840, layer 1: 2·96·24 = 4,608 weights
    assert cost.flops == 2 * 30 * (3_840 + 4_608)  # 506,880, as mkldnn's two layers
    # Read: input 480, the weight buffer (weights + 4 biases of 96) 8,832, hx and cx 2·144.
    assert cost.bytes_read == (480 + 8_448 + 384 + 288) * FP32
    # Written: output 720, hy and cy 2·144, reserve 1,000 bytes; the weight buffer it
    # returns is the one it was given, not written.
    assert cost.bytes_written == (720 + 288) * FP32 + 1_000


def test_packed_sequences_count_their_tokens() -> None:
    torch.manual_seed(0)
    call = CudnnCall.of(nn.GRU(EMBED, HIDDEN))
    # Packed: sequences of 4, 2 and 1 tokens -> batch_sizes [3, 2, 1, 1], 7 rows.
    packed = torch.randn(7, EMBED)
    args = (packed, call.weights, 4, call.weight_buf, call.hx, None, *call.settings(), [3, 2, 1, 1])
    out = (torch.zeros(7, HIDDEN), torch.zeros_like(call.hx), torch.zeros(0), torch.zeros(0))
    cost = op_cost(aten._cudnn_rnn.default, (*args, None), {}, (*out, call.weight_buf))
    # 7 tokens · (W_ih [72, 16] 1,152 + W_hh [72, 24] 1,728) · 2
    assert cost.flops == 2 * 7 * (1_152 + 1_728)


def gate_math_flops(cell: nn.RNNCellBase, *inputs: Any) -> int:
    """The FLOPs lightspeed counts for one step of `cell` on the CPU, matmuls left out."""
    return sum(op.flops for op in capture_forward(cell, *inputs) if op.macs is None)


def test_fused_lstm_cell_counts_the_cpu_decomposition_gate_math() -> None:
    torch.manual_seed(0)
    cell = nn.LSTMCell(EMBED, HIDDEN)
    x, h, c = torch.randn(BATCH, EMBED), torch.randn(BATCH, HIDDEN), torch.randn(BATCH, HIDDEN)
    decomposed = gate_math_flops(cell, x, (h, c))
    # CUDA runs the two gate matmuls as mm (torch's formula), then the fused gate math.
    gates = torch.randn(BATCH, 4 * HIDDEN)
    args = (gates, gates.clone(), c, cell.bias_ih.detach(), cell.bias_hh.detach())
    out = (torch.zeros_like(h), torch.zeros_like(c), torch.zeros_like(gates))
    forward = op_cost(aten._thnn_fused_lstm_cell.default, args, {}, out)
    assert forward.flops == decomposed == 22 * BATCH * HIDDEN  # 22 per hidden unit = 1,584
    assert forward.macs is None
    # gates 2·288, c 72, biases 2·96 read; hy, cy 2·72 and the workspace 288 written
    assert (forward.bytes_read, forward.bytes_written) == (840 * FP32, 432 * FP32)

    backward_impl = aten._thnn_fused_lstm_cell_backward_impl.default
    grad_out = (torch.zeros_like(gates), torch.zeros_like(c), torch.zeros(4 * HIDDEN))
    cost = op_cost(backward_impl, (h, None, c, c, gates, True), {}, grad_out)
    assert cost.flops == (23 + 4) * BATCH * HIDDEN  # gate gradients + bias gradient sum
    no_bias = op_cost(backward_impl, (h, c, c, c, gates, False), {}, grad_out[:2])
    assert no_bias.flops == 23 * BATCH * HIDDEN
    assert op_cost(backward_impl, (None, None, c, c, gates, True), {}, ()).flops == 0


def test_fused_gru_cell_counts_the_cpu_decomposition_gate_math() -> None:
    torch.manual_seed(0)
    cell = nn.GRUCell(EMBED, HIDDEN)
    x, h = torch.randn(BATCH, EMBED), torch.randn(BATCH, HIDDEN)
    decomposed = gate_math_flops(cell, x, h)
    gates = torch.randn(BATCH, 3 * HIDDEN)
    out = (torch.zeros_like(h), torch.zeros(BATCH, 5 * HIDDEN))
    forward = op_cost(aten._thnn_fused_gru_cell.default, (gates, gates, h, None, None), {}, out)
    assert forward.flops == decomposed == 16 * BATCH * HIDDEN  # 16 per hidden unit = 1,152

    backward = aten._thnn_fused_gru_cell_backward.default
    grads = (gates, gates.clone(), h, torch.zeros(3 * HIDDEN), torch.zeros(3 * HIDDEN))
    assert op_cost(backward, (h, out[1], True), {}, grads).flops == 22 * BATCH * HIDDEN
    assert op_cost(backward, (h, out[1], False), {}, grads[:3]).flops == 16 * BATCH * HIDDEN


def test_other_backends_use_the_same_layer_convention() -> None:
    torch.manual_seed(0)
    call = CudnnCall.of(stacked(nn.LSTM))
    expected = call.forward_cost().flops  # 506,880
    mode, hidden, _, layers, batch_first, dropout, train, bidirectional = call.settings()
    miopen = (call.x, call.weights, 4, call.hx, call.cx, mode, hidden, layers, batch_first)
    miopen += (dropout, train, bidirectional, [], None)
    outputs = (call.output, call.hx, call.cx, torch.zeros(0), torch.zeros(0))
    assert op_cost(aten.miopen_rnn.default, miopen, {}, outputs).flops == expected
    mps = (call.x, [call.hx, call.cx], call.weights, True, layers, dropout, train, bidirectional)
    assert op_cost(aten._lstm_mps.default, (*mps, False), {}, outputs).flops == expected
    mps_backward = (call.output, None, None, call.x, call.x, call.x, call.output)
    mps_backward += ([call.hx, call.cx], call.weights, True, layers, dropout, train)
    mps_backward += (bidirectional, False)
    cost = op_cost(aten.lstm_mps_backward.default, mps_backward, {}, (call.x, [], []))
    assert cost.flops == 2 * expected


# Dynamically quantized layers (inference only) take packed weights as opaque objects,
# which carry no shapes to count from.
UNCOUNTED_RNN_OPS = {"quantized_gru", "quantized_lstm"}


def test_every_recurrent_op_that_reaches_dispatch_has_a_flop_count() -> None:
    composite = torch._C.DispatchKey.CompositeImplicitAutograd
    ops = []
    for name in torch._C._dispatch_get_all_op_names():  # private: the full operator list
        packet_name, _, overload = name.removeprefix("aten::").partition(".")
        if name.startswith("aten::") and any(k in packet_name for k in ("rnn", "lstm", "gru")):
            func = getattr(getattr(aten, packet_name), overload or "default")
            if not func.has_kernel_for_dispatch_key(composite):
                ops.append(func)
    unknown = {f.overloadpacket.__name__ for f in ops if not known_flops(f)}
    assert ops and unknown == UNCOUNTED_RNN_OPS
