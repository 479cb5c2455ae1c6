"""Activation checkpointing: the plan, and one step equal to the plain step, bit for bit.

Equality is exact (`torch.equal`), not within a tolerance: the recompute repeats the
same CPU kernels on the same inputs with the RNG restored (so dropout draws the same
masks), and non-reentrant checkpoint leaves the backward graph the one the plain step
builds, so every gradient is summed in the same order.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from factories import ConvNet, convnet_workload
from lightspeed import suite
from lightspeed.errors import ConfigError
from lightspeed.measure.memory import measure_memory
from lightspeed.measure.step import PreparedStep, StepSettings, prepare
from lightspeed.optimize import checkpointing as checkpoint_module
from lightspeed.optimize.checkpoint_plan import segment_sizes
from lightspeed.optimize.checkpointing import checkpoint, checkpoint_model, checkpoint_plan
from lightspeed.workload import Workload


def stepped(workload: Workload) -> PreparedStep:
    """`workload` built from seed 0 after one training step from seed 1."""
    torch.manual_seed(0)
    prepared = prepare(workload, StepSettings())
    torch.manual_seed(1)
    prepared.step()
    return prepared


def assert_same_step(plain: PreparedStep, checkpointed: PreparedStep) -> None:
    assert checkpointed.last_loss is not None and plain.last_loss is not None
    assert torch.equal(checkpointed.last_loss, plain.last_loss)
    ours = dict(checkpointed.model.named_parameters())
    theirs = dict(plain.model.named_parameters())
    assert list(ours) == list(theirs)
    for name, param in theirs.items():
        assert torch.equal(ours[name], param), name
        grad = ours[name].grad
        assert grad is not None and param.grad is not None, name
        assert torch.equal(grad, param.grad), name
    ours_state = checkpointed.model.state_dict()
    theirs_state = plain.model.state_dict()
    assert list(ours_state) == list(theirs_state)
    for name, value in theirs_state.items():
        assert torch.equal(ours_state[name], value), name


TRANSFORMERS = ["gpt2-tiny", "transformer-encoder-tiny", "bert-base-tiny", "transformer-base-tiny"]


@pytest.mark.parametrize("name", TRANSFORMERS)
def test_a_checkpointed_suite_step_equals_the_plain_step(name: str) -> None:
    plain = stepped(suite.get(name))
    checkpointed = stepped(checkpoint(suite.get(name)))
    assert checkpointed.workload.name == f"{name}+checkpoint"
    assert_same_step(plain, checkpointed)


@pytest.mark.parametrize("stack", ["sequential", "modulelist"])
def test_batchnorm_and_dropout_recompute_to_the_plain_step(stack: str) -> None:
    """BatchNorm's running statistics (mean, variance, batches tracked) are updated once
    a step although each block runs twice, and dropout draws the same masks."""
    plain = stepped(convnet_workload(stack))
    checkpointed = stepped(checkpoint(convnet_workload(stack)))
    assert_same_step(plain, checkpointed)
    assert int(checkpointed.model.state_dict()["blocks.0.bn.num_batches_tracked"]) == 1


def bn_calls_in_a_step(workload: Workload) -> int:
    torch.manual_seed(0)
    prepared = prepare(workload, StepSettings())
    calls = []
    for module in prepared.model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.register_forward_hook(lambda *_: calls.append(1))
    prepared.step()
    return len(calls)


def test_the_blocks_do_run_twice() -> None:
    """What makes the running-statistics test above bite: every BatchNorm runs in the
    forward and again in the recompute."""
    assert bn_calls_in_a_step(convnet_workload("sequential")) == 4
    assert bn_calls_in_a_step(checkpoint(convnet_workload("sequential"))) == 8


def test_without_throwaway_statistics_the_recompute_would_update_them_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(checkpoint_module._ThrowawayRunningStats, "__enter__", lambda self: None)
    monkeypatch.setattr(checkpoint_module._ThrowawayRunningStats, "__exit__", lambda *_: None)
    checkpointed = stepped(checkpoint(convnet_workload("sequential")))
    assert int(checkpointed.model.state_dict()["blocks.0.bn.num_batches_tracked"]) == 2


def test_eval_and_no_grad_forwards_are_not_checkpointed() -> None:
    model = ConvNet("sequential")
    checkpoint_model(model)
    calls = []
    model.get_submodule("blocks.0.bn").register_forward_hook(lambda *_: calls.append(1))
    x = torch.randn(2, 3, 8, 8)
    model.eval()
    model(x).sum().backward()
    with torch.no_grad():
        model.train()
        model(x)
    assert calls == [1, 1]  # one forward each, no recompute


def test_autocast_then_checkpoint_equals_autocast_alone() -> None:
    """The recompute restores the forward's autocast state, so the bf16 step is kept too."""
    from lightspeed.optimize.precision import autocast

    plain = stepped(autocast(suite.get("gpt2-tiny")))
    checkpointed = stepped(checkpoint(autocast(suite.get("gpt2-tiny"))))
    assert checkpointed.workload.name == "gpt2-tiny+amp-bf16+checkpoint"
    assert_same_step(plain, checkpointed)


def test_checkpointing_cuts_the_saved_activations() -> None:
    """gpt2-tiny's two blocks each save a dozen [4, 128, 128] and [4, 128, 512] fp32
    tensors for backward (LayerNorm, qkv, attention, the 4x MLP and GELU); checkpointed,
    each keeps only its input, and what stays is outside the blocks (the [4, 128, 1024]
    logits and their log-softmax among them)."""

    def activations(workload: Workload) -> int:
        prepared = stepped(workload)  # the warm-up: optimizer state exists
        return measure_memory(prepared).activations_bytes

    plain = activations(suite.get("gpt2-tiny"))
    checkpointed = activations(checkpoint(suite.get("gpt2-tiny")))
    block_input = 4 * 128 * 128 * 4  # [B, T, C] fp32
    assert checkpointed < plain / 2
    assert plain - checkpointed > 2 * 8 * block_input


def stack_of(n: int, container: Callable[..., nn.Module]) -> nn.Module:
    model = nn.Module()
    model.stem = nn.Linear(4, 4)
    model.blocks = container([nn.Linear(4, 4) for _ in range(n)])
    return model


@pytest.mark.parametrize(("n", "sizes"), [(8, [3, 3, 2]), (12, [3, 3, 3, 3])])
def test_auto_splits_a_sequential_into_root_n_segments(n: int, sizes: list[int]) -> None:
    plan = checkpoint_plan(stack_of(n, lambda blocks: nn.Sequential(*blocks)))
    # ⌈√8⌉ = 3 segments of 3, 3, 2; ⌈√12⌉ = 4 segments of 3.
    assert [len(segment) for segment in plan.segments] == sizes
    assert plan.modules == tuple(f"blocks.{i}" for i in range(n))
    assert (plan.stacks, plan.blocks) == (("blocks",), n)


def test_auto_checkpoints_a_modulelist_block_by_block() -> None:
    plan = checkpoint_plan(stack_of(8, nn.ModuleList))
    assert plan.segments == tuple((f"blocks.{i}",) for i in range(8))
    assert "ModuleList" in plan.reason


@given(st.integers(min_value=1, max_value=400))
def test_segments_are_root_n_runs_of_near_equal_length(n: int) -> None:
    sizes = segment_sizes(n)
    assert len(sizes) == math.ceil(math.sqrt(n))
    assert sum(sizes) == n
    assert max(sizes) - min(sizes) <= 1


def test_a_merged_segment_runs_its_blocks_once_in_forward() -> None:
    """Eight Linear blocks in three segments: a forward calls each block once (the
    blocks' own checkpoint is off inside their segment), backward recomputes each once.
    Counted on entry: the recompute stops inside a segment's last block, once it has
    what backward needs (torch's early stop), so that block never returns."""
    model = stack_of(8, lambda blocks: nn.Sequential(*blocks))
    checkpoint_model(model)
    calls: list[int] = []
    blocks = model.get_submodule("blocks")
    for i, block in enumerate(blocks.children()):
        block.register_forward_pre_hook(lambda *_, i=i: calls.append(i))
    y = blocks(model.get_submodule("stem")(torch.randn(2, 4)))
    assert calls == list(range(8))
    y.sum().backward()
    assert sorted(calls[8:]) == list(range(8))


def test_a_deep_copy_checkpoints_its_own_modules() -> None:
    model = ConvNet("sequential")
    checkpoint_model(model)
    twin = copy.deepcopy(model)
    for name, module in twin.named_modules():
        wrapper: Any = module.__dict__.get("forward")
        if wrapper is not None and hasattr(wrapper, "module"):
            assert wrapper.module is module, name


def test_patterns_select_modules_and_their_ancestors_cover_the_rest() -> None:
    model = ConvNet("modulelist")
    # blocks.* matches blocks.0 and blocks.0.conv alike: the block covers its conv.
    assert checkpoint_plan(model, "blocks.*").modules == tuple(f"blocks.{i}" for i in range(4))
    assert checkpoint_plan(model, ["blocks.2.bn", "stem"]).modules == ("stem", "blocks.2.bn")


def test_an_unknown_module_name_suggests_the_closest() -> None:
    with pytest.raises(ConfigError, match=r"'blokcs\.0' names no module.*Did you mean 'blocks\.0'"):
        checkpoint_plan(ConvNet("modulelist"), ["blokcs.0"])


def test_auto_without_repeated_blocks_says_to_name_modules() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    with pytest.raises(ConfigError, match=r"no stack of repeated blocks.*name the modules"):
        checkpoint_plan(model)


def test_checkpointing_twice_is_refused() -> None:
    model = ConvNet("sequential")
    checkpoint_model(model)
    with pytest.raises(ConfigError, match="checkpointed already"):
        checkpoint_model(model)


@pytest.mark.parametrize("stack", ["sequential", "modulelist"])
def test_an_observer_sees_every_region_and_can_run_it_as_checkpoint_would(stack: str) -> None:
    seen: list[int] = []

    def observe(
        modules: Any,
        forward: Callable[..., Any],
        checkpointed: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        seen.append(len(modules))
        return checkpointed(*args, **kwargs)

    plain = stepped(convnet_workload(stack))
    torch.manual_seed(0)
    observed = prepare(
        checkpoint(convnet_workload(stack), ["blocks.1", "blocks.3"]), StepSettings()
    )
    torch.manual_seed(1)
    with checkpoint_module.observing_regions(observe):
        observed.step()
    assert seen == [1, 1]  # blocks.1 and blocks.3, once each
    assert_same_step(plain, observed)


@pytest.mark.parametrize("segments", [["blocks.0:2", "blocks.2:4"], ["blocks.1:3"], ["blocks.3:4"]])
def test_named_segments_recompute_to_the_plain_step(segments: list[str]) -> None:
    workload = convnet_workload("sequential")
    checkpointed = checkpoint(workload, segments)
    plan = checkpoint_plan(ConvNet("sequential"), segments)
    assert plan.stacks == ("blocks",)
    assert all(
        len(segment) == int(s[-1]) - int(s[-3])
        for segment, s in zip(plan.segments, segments, strict=True)
    )
    assert_same_step(stepped(workload), stepped(checkpointed))
    # Each block runs once in forward and once more if a segment covers it.
    covered = sum(len(segment) for segment in plan.segments)
    assert bn_calls_in_a_step(checkpointed) == 4 + covered


def test_a_segment_of_a_modulelist_or_out_of_range_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"nn\.Sequential"):
        checkpoint_plan(ConvNet("modulelist"), ["blocks.0:2"])
    with pytest.raises(ConfigError, match="outside 'blocks'"):
        checkpoint_plan(ConvNet("sequential"), ["blocks.2:5"])
    with pytest.raises(ConfigError, match="overlap"):
        checkpoint_plan(ConvNet("sequential"), ["blocks.0:2", "blocks.1:3"])


# Op-level recomputation (Echo): products, convolutions and attention kept, the rest
# recomputed, through selective activation checkpointing.


@pytest.mark.parametrize("name", ["gpt2-tiny", "transformer-encoder-tiny"])
def test_op_level_recompute_equals_the_plain_step(name: str) -> None:
    plain = stepped(suite.get(name))
    op_level = stepped(checkpoint(suite.get(name), "ops"))
    assert_same_step(plain, op_level)


class _DropoutEncoder(nn.Module):
    """Three encoder layers with dropout in attention, the MLP and the residuals."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(32, 4, 64, dropout=0.2, batch_first=True) for _ in range(3)
        )
        self.head = nn.Linear(32, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x.mean(1))


def _dropout_encoder() -> Workload:
    return Workload(
        name="dropout-encoder",
        model=_DropoutEncoder,
        batch=lambda n: (torch.randn(n, 10, 32), torch.randint(0, 5, (n,))),
        loss=lambda m, b: nn.functional.cross_entropy(m(b[0]), b[1]),
        batch_size=4,
    )


@pytest.mark.parametrize("modules", ["ops", "ops:layers.1", ["layers.0", "ops:layers.2"]])
def test_op_level_recompute_with_dropout_and_batchnorm_equals_the_plain_step(
    modules: str | list[str],
) -> None:
    """Dropout draws the same masks in the recompute (checkpoint restores the RNG), with
    op-level modules alone or beside whole ones; BatchNorm's statistics update once."""
    assert_same_step(stepped(_dropout_encoder()), stepped(checkpoint(_dropout_encoder(), modules)))
    plain = stepped(convnet_workload("modulelist"))
    op_level = stepped(checkpoint(convnet_workload("modulelist"), "ops"))
    assert_same_step(plain, op_level)
    assert int(op_level.model.state_dict()["blocks.0.bn.num_batches_tracked"]) == 1


def test_op_level_recompute_keeps_the_products_and_drops_the_rest() -> None:
    """gpt2-tiny op by op keeps what its products, attention and block inputs return and
    recomputes its LayerNorm, GELU and residual outputs: fewer activations than the plain
    step (selective checkpointing's own store counted), with no matrix product run
    twice."""
    from torch.utils.flop_counter import FlopCounterMode

    def activations_and_flops(workload: Workload) -> tuple[int, int]:
        prepared = stepped(workload)
        kept = measure_memory(prepared).activations_bytes
        with FlopCounterMode(display=False) as counter:
            prepared.step()
        return kept, counter.get_total_flops()

    plain, plain_flops = activations_and_flops(suite.get("gpt2-tiny"))
    ops, ops_flops = activations_and_flops(checkpoint(suite.get("gpt2-tiny"), "ops"))
    whole, whole_flops = activations_and_flops(checkpoint(suite.get("gpt2-tiny")))
    block_input = 4 * 128 * 128 * 4  # [B, T, C] fp32
    # Each of the two blocks drops its two LayerNorm outputs and its [B, T, 4C] GELU
    # output, and keeps its two output projections' results, which the plain step does
    # not save: 4 [B, T, C] tensors less a block at least. Whole blocks keep less still.
    assert plain - ops >= 2 * 4 * block_input
    assert whole < ops
    assert ops_flops == plain_flops < whole_flops


def test_op_level_plans() -> None:
    model = stack_of(3, nn.ModuleList)
    plan = checkpoint_plan(model, "ops")
    assert plan.ops == plan.modules == ("blocks.0", "blocks.1", "blocks.2")
    plan = checkpoint_plan(model, ["stem", "ops:blocks.1"])
    assert plan.modules == ("stem", "blocks.1") and plan.ops == ("blocks.1",)
    with pytest.raises(ConfigError, match="recomputed whole already"):
        checkpoint_plan(model, ["blocks.*", "ops:blocks.1"])
    with pytest.raises(ConfigError, match=r"for 'ops' to recompute op by op; name the modules"):
        checkpoint_plan(nn.Sequential(nn.Linear(2, 2), nn.ReLU()), "ops")
    with pytest.raises(ConfigError, match="names no module"):
        checkpoint_plan(model, "ops:nothing")


@pytest.mark.parametrize(
    ("plan", "eager_first"), [("ops", False), ("ops+1", True), ("ops+1", False)]
)
def test_op_level_recompute_compiles_in_one_graph(plan: str, eager_first: bool) -> None:
    """Under torch.compile the policy is handed to PyTorch's own selective checkpointing
    (no graph break), and the step's gradients are the eager step's. With products
    recomputed too (`ops+1`), a block's products are found by a run on fake tensors,
    which torch.compile does not trace: found by an eager step first, or else through a
    graph break at each block's first compiled call."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    plain = stack_of(3, nn.ModuleList)
    model = copy.deepcopy(plain)
    checkpoint_model(model, plan)

    def loss(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
        for block in m.blocks:
            x = torch.nn.functional.gelu(block(x))
        return x.square().sum()

    x = torch.randn(5, 4)
    if eager_first:
        loss(model, x).backward()  # eager: the products found
        model.zero_grad()
    torch._dynamo.utils.counters.clear()
    loss(plain, x).backward()
    torch.compile(loss, backend="aot_eager")(model, x).backward()
    breaks = sum(torch._dynamo.utils.counters["graph_break"].values())
    assert (breaks == 0) == (eager_first or plan == "ops")
    for p, q in zip(plain.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad)
    torch._dynamo.reset()


def test_under_torch_compile_running_statistics_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Compiled, the recompute would update BatchNorm's statistics a second time (no
    context of ours can swap them): refused with a clear line."""
    model = convnet_workload("modulelist").model()
    checkpoint_model(model, "ops")
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    with pytest.raises(ConfigError, match="running statistics"):
        model.blocks[0](torch.randn(2, 3, 8, 8))


# Op by op with products recomputed too (`ops+K`): the K kinds of product that keep the
# most bytes per FLOP dropped from what is kept.


@pytest.mark.parametrize("name", ["gpt2-tiny", "transformer-encoder-tiny"])
@pytest.mark.parametrize("products", [1, 4])
def test_ops_with_products_recomputed_equals_the_plain_step(name: str, products: int) -> None:
    plain = stepped(suite.get(name))
    assert_same_step(plain, stepped(checkpoint(suite.get(name), f"ops+{products}")))


def test_ops_with_products_recomputed_with_dropout_and_batchnorm_equals_the_plain_step() -> None:
    """The fake run that finds a block's products draws no random number and updates no
    running statistic: dropout masks and BatchNorm's statistics stay the plain step's."""
    plain, deeper = _dropout_encoder(), checkpoint(_dropout_encoder(), ["ops+2:layers.*"])
    assert_same_step(stepped(plain), stepped(deeper))
    op_level = stepped(checkpoint(convnet_workload("modulelist"), "ops+1"))
    assert_same_step(stepped(convnet_workload("modulelist")), op_level)
    assert int(op_level.model.state_dict()["blocks.0.bn.num_batches_tracked"]) == 1


def test_each_kind_of_product_recomputed_keeps_its_outputs_less_and_costs_its_flops() -> None:
    """gpt2-tiny's blocks, op by op with K = 0 … 5 kinds of product recomputed, in the
    order of `recompute_order`: each kind more keeps exactly its outputs' bytes less (on
    fake tensors) and recomputes its FLOPs (lightspeed's counts), or none: the MLP's
    second projection, whose output no op of backward reads, is not run again (on real
    tensors too, with bit-equal gradients: `test_ops_with_products_recomputed_…`)."""
    from factories import FAKE_CPU
    from lightspeed.measure.shape_only import profile_shape_only
    from lightspeed.optimize.checkpointing import SAVED_OP_NAMES
    from lightspeed.optimize.recompute_products import kind_of, products_in, recompute_order
    from lightspeed.predict.carry import forward_ops

    workload = suite.get("gpt2-tiny")
    plain = profile_shape_only(workload, FAKE_CPU)
    blocks = ["blocks.0", "blocks.1"]
    products = {p.kind: p for p in products_in(forward_ops(plain, "blocks.0"), SAVED_OP_NAMES)}
    order = recompute_order(products.values())
    # FLOPs as the profile counts them (attention's too, which the order does not rank).
    counted = {
        kind: sum(op.flops for op in forward_ops(plain, "blocks.0") if kind_of(op) == kind)
        for kind in order
    }
    assert all(counted[k] == p.flops for k, p in products.items() if p.flops)
    assert len(order) == 5  # the QKV projection, attention, the output projection, the MLP's two

    def kept_and_flops(modules: str) -> tuple[int, int]:
        shapes = profile_shape_only(checkpoint(workload, modules), FAKE_CPU)
        assert shapes.memory is not None
        return shapes.memory.activations_bytes, sum(op.flops for op in shapes.ops)

    kept, flops = kept_and_flops("ops")
    not_run = []
    for count, kind in enumerate(order, start=1):
        deeper_kept, deeper_flops = kept_and_flops(f"ops+{count}")
        assert kept - deeper_kept == len(blocks) * products[kind].bytes, kind
        assert deeper_flops - flops in (0, len(blocks) * counted[kind]), kind
        if deeper_flops == flops:
            not_run.append(kind)
        kept, flops = deeper_kept, deeper_flops
    assert not_run == [("aten::mm", ((512, 512), (512, 128)))]


def test_ops_with_products_plans_and_their_errors() -> None:
    model = stack_of(3, nn.ModuleList)
    plan = checkpoint_plan(model, ["ops+1:blocks.0", "ops:blocks.2"])
    assert plan.ops == ("blocks.0", "blocks.2") and plan.products == (1, 0)
    assert [plan.products_of(m) for m in ("blocks.0", "blocks.1", "blocks.2")] == [1, None, 0]
    assert "1 or 0" not in plan.reason and "0 or 1 kinds of product" in plan.reason
    assert checkpoint_plan(model, "ops").products == ()
    with pytest.raises(ConfigError, match="with 1 and with 2 kinds of product"):
        checkpoint_plan(model, ["ops+1:blocks.*", "ops+2:blocks.1"])
    checkpoint_model(model, "ops+2")
    with pytest.raises(ConfigError, match=r"ops\+2 asks 'blocks.0' to recompute 2 .* it has 1"):
        model.blocks[0](torch.randn(5, 4))
