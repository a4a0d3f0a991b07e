"""runtime_shim.cuda_graph: static buffers, replay, re-capture, per-instance graphs.

Everything but the capture itself runs on CPU: `_record`, the one CUDA-specific step,
is replaced by a stand-in whose "graph" reruns the variant on the static buffers and
writes the results into the static outputs, as a replay does. The real `_record`
is checked to refuse CPU tensors clearly; benchmarks/cuda_graphs_check.py checks the
whole thing on a GPU.
"""

from __future__ import annotations

import copy
import pickle
import warnings

import pytest
import torch
from torch import nn

import runtime_shim
from runtime_shim import cuda_graph
from runtime_shim.cuda_graphs import (
    ATTRIBUTE,
    CaptureFailed,
    CudaGraphError,
    CudaGraphRunner,
    _tensors,
)


class Recorder:
    """A stand-in for `_record`: counts captures and replays."""

    def __init__(self) -> None:
        self.captures = 0
        self.replays = 0

    def __call__(self, runner: CudaGraphRunner, run):
        self.captures += 1
        outputs = run()

        def replay() -> None:
            self.replays += 1
            for static, fresh in zip(_tensors(outputs), _tensors(run())):
                static.copy_(fresh)

        return outputs, replay


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    rec = Recorder()
    monkeypatch.setattr(
        CudaGraphRunner, "_record", lambda runner, run: rec(runner, run)
    )
    return rec


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)


def variant(self: Net, x: torch.Tensor) -> torch.Tensor:
    """Stands for a generated `_cuda_0`."""
    return torch.relu(x @ self.lin.weight.t() + self.lin.bias)


def reads(self: Net) -> tuple[torch.Tensor, ...]:
    return (self.lin.weight, self.lin.bias)


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def net() -> Net:
    torch.manual_seed(0)
    return Net().eval()


def test_replays_with_new_inputs_into_the_same_outputs(recorder: Recorder) -> None:
    m = net()
    with torch.no_grad():
        first = cuda_graph(m, variant, reads)(m, randn(2, 4, seed=1))
        torch.testing.assert_close(first, variant(m, randn(2, 4, seed=1)))
        second = cuda_graph(m, variant, reads)(m, randn(2, 4, seed=2))
        torch.testing.assert_close(second, variant(m, randn(2, 4, seed=2)))
    assert second is first  # the graph's buffer: overwritten by the next call
    assert (recorder.captures, recorder.replays) == (1, 2)
    runner = cuda_graph(m, variant, reads)
    assert runner.captures == 1 and runner.disabled is None


def test_inputs_are_copied_unless_they_are_the_static_buffer(
    recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = net()
    runner = cuda_graph(m, variant, reads)
    with torch.no_grad():
        x = randn(2, 4, seed=1)
        runner(m, x)
        (static,) = runner.static_inputs
        assert static is not x  # the caller's tensor is never captured
        copies = []
        copy_ = torch.Tensor.copy_
        monkeypatch.setattr(
            torch.Tensor, "copy_", lambda t, src: copies.append(src) or copy_(t, src)
        )
        static.copy_(randn(2, 4, seed=3))
        copies.clear()
        out = runner(m, static)
        assert not any(src is static for src in copies)
        torch.testing.assert_close(out, variant(m, randn(2, 4, seed=3)))
        runner(m, x)
        assert any(src is x for src in copies)


def test_recaptures_when_a_parameter_moves(recorder: Recorder) -> None:
    m = net()
    x = randn(2, 4, seed=1)
    with torch.no_grad():
        cuda_graph(m, variant, reads)(m, x)
        m.lin.weight.add_(1.0)  # in place: same address, the graph sees it
        out = cuda_graph(m, variant, reads)(m, x)
        torch.testing.assert_close(out, variant(m, x))
        assert recorder.captures == 1
        m.lin.weight = nn.Parameter(randn(3, 4, seed=5))  # replaced
        out = cuda_graph(m, variant, reads)(m, x)
        torch.testing.assert_close(out, variant(m, x))
        assert recorder.captures == 2
        m.load_state_dict(  # assign: the module takes these very tensors
            {"lin.weight": randn(3, 4, seed=6), "lin.bias": randn(3, seed=7)},
            assign=True,
        )
        out = cuda_graph(m, variant, reads)(m, x)
        torch.testing.assert_close(out, variant(m, x))
        assert recorder.captures == 3


def test_each_instance_has_its_own_graph(recorder: Recorder) -> None:
    a, b = net(), net()
    with torch.no_grad():
        b.lin.bias.add_(10.0)
        x = randn(2, 4, seed=1)
        out_a = cuda_graph(a, variant, reads)(a, x)
        out_b = cuda_graph(b, variant, reads)(b, x)
        assert out_a is not out_b
        torch.testing.assert_close(out_a, variant(a, x))
        torch.testing.assert_close(out_b, variant(b, x))
    assert a.__dict__[ATTRIBUTE] is not b.__dict__[ATTRIBUTE]
    assert recorder.captures == 2


def test_copies_start_without_graphs(recorder: Recorder) -> None:
    m = net()
    with torch.no_grad():
        cuda_graph(m, variant, reads)(m, randn(2, 4))
    assert len(m.__dict__[ATTRIBUTE]) == 1
    for clone in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        assert len(clone.__dict__[ATTRIBUTE]) == 0
        assert cuda_graph(clone, variant, reads) is not cuda_graph(m, variant, reads)
    assert set(m.state_dict()) == {"lin.weight", "lin.bias"}


def test_function_targets_and_keyword_arguments(recorder: Recorder) -> None:
    def scale(x, *, by):
        return x * by

    def exported(x, *, by):  # the owner of a function target's graph
        return cuda_graph(exported, scale)(x, by=by)

    a, b = randn(3), randn(3, seed=1)
    torch.testing.assert_close(exported(a, by=b), a * b)
    torch.testing.assert_close(exported(b, by=a), a * b)
    torch.testing.assert_close(exported(a, by=a), a * a)
    assert recorder.captures == 1


def test_an_output_that_is_an_argument_runs_without_a_graph(
    recorder: Recorder,
) -> None:
    def view(x):
        return x[1:]

    x = randn(4)
    with pytest.warns(RuntimeWarning, match="an output is an argument's memory"):
        out = cuda_graph(view, view)(x)
    assert out.data_ptr() == x[1:].data_ptr()  # the caller's memory, as eager
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cuda_graph(view, view)(x).data_ptr() == x[1:].data_ptr()
    assert cuda_graph(view, view).disabled == "an output is an argument's memory"


def test_a_failed_capture_runs_without_a_graph(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fail(runner, run):
        run()
        raise CaptureFailed("operation not permitted when stream is capturing")

    monkeypatch.setattr(CudaGraphRunner, "_record", fail)

    def double(x):
        return x * 2

    with pytest.warns(RuntimeWarning, match="double runs without a CUDA graph: "):
        out = cuda_graph(double, double)(randn(3))
    torch.testing.assert_close(out, randn(3) * 2)
    runner = cuda_graph(double, double)
    assert runner.disabled.startswith("capture failed: operation not permitted")
    torch.testing.assert_close(runner(randn(3, seed=1)), randn(3, seed=1) * 2)


def test_cpu_tensors_are_refused_clearly() -> None:
    m = net()
    with torch.no_grad(), pytest.raises(CudaGraphError) as info:
        cuda_graph(m, variant, reads)(m, randn(2, 4))
    assert str(info.value) == (
        "Net: variant: a CUDA graph needs its tensor arguments on one CUDA device, "
        "not cpu"
    )


# ---------------------------------------------------------------- graph trees
# A variant that branches on tensor data, as codegen/graph_segments.py writes it:
# segment functions, and the variant calling them through `graphs.run`.


def seg0(self: Net, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = x @ self.lin.weight.t() + self.lin.bias
    return (y, y.sum() > 0)


def seg1(self: Net, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return y.relu()


def seg2(self: Net, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return y.tanh() + x.sum()


def branchy(graphs, self: Net, x: torch.Tensor) -> torch.Tensor:
    """Stands for a generated `_cuda_1` of a variant with a branch."""
    y, gt = graphs.run(seg0, self, x)
    if gt:
        return graphs.run(seg1, self, x, y)
    else:
        return graphs.run(seg2, self, x, y)


def eager_branchy(m: Net, x: torch.Tensor) -> torch.Tensor:
    y = x @ m.lin.weight.t() + m.lin.bias
    return y.relu() if y.sum() > 0 else y.tanh() + x.sum()


def signed(sign: float, seed: int) -> torch.Tensor:
    """An input taking the first branch (sign 1) or the second (-1) for `net()`:
    the first seed from `seed` on whose input does."""
    m = net()
    while True:
        x = randn(2, 4, seed=seed)
        if ((x @ m.lin.weight.t() + m.lin.bias).sum() > 0) == (sign > 0):
            return x
        seed += 1000


def tree(m: Net):
    return runtime_shim.cuda_graph_tree(m, branchy, reads)


def test_tree_captures_each_segment_on_first_use(recorder: Recorder) -> None:
    m = net()
    outputs = {1.0: [], -1.0: []}
    with torch.no_grad():
        for i, sign in enumerate([1.0, 1.0, -1.0, 1.0, -1.0, -1.0]):
            x = signed(sign, seed=10 + i)
            out = tree(m)(m, x)
            torch.testing.assert_close(out, eager_branchy(m, x))
            outputs[sign].append(out)
            if i == 1:  # one path so far: the other branch is not captured
                assert tree(m).segments == ["seg0", "seg1"]
    assert tree(m).segments == ["seg0", "seg1", "seg2"]
    assert (recorder.captures, tree(m).captures) == (3, 3)
    assert recorder.replays == 6 + 3 + 3  # seg0 every call, one branch each
    for outs in outputs.values():  # each branch returns its graph's buffer
        assert all(o is outs[0] for o in outs)
    assert tree(m).disabled is None


def test_tree_passes_segment_outputs_on_without_copies(
    recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = net()
    seen = []

    def spy(graphs, self, x):
        y, gt = graphs.run(seg0, self, x)
        seen.append((x, y))
        return graphs.run(seg1 if gt else seg2, self, x, y)

    with torch.no_grad():
        runtime_shim.cuda_graph_tree(m, spy, reads)(m, signed(1.0, seed=1))
        copies = []
        copy_ = torch.Tensor.copy_
        monkeypatch.setattr(
            torch.Tensor, "copy_", lambda t, src: copies.append(src) or copy_(t, src)
        )
        x = signed(-1.0, seed=2)
        out = runtime_shim.cuda_graph_tree(m, spy, reads)(m, x)
        torch.testing.assert_close(out, eager_branchy(m, x))
    (static,) = runtime_shim.cuda_graph_tree(m, spy, reads).static_inputs
    assert seen[0][0] is seen[1][0] is static  # the variant sees the static input
    assert seen[0][1] is seen[1][1]  # and segment 0's one output buffer
    assert sum(src is x for src in copies) == 1  # x copied in, once


def test_tree_recaptures_every_segment_when_a_parameter_moves(
    recorder: Recorder,
) -> None:
    m = net()
    with torch.no_grad():
        tree(m)(m, signed(1.0, seed=1))
        tree(m)(m, signed(-1.0, seed=2))
        assert recorder.captures == 3
        m.lin.bias.add_(0.5)  # in place: nothing to re-capture
        x = signed(-1.0, seed=3)
        torch.testing.assert_close(tree(m)(m, x), eager_branchy(m, x))
        assert recorder.captures == 3
        m.lin.weight = nn.Parameter(randn(3, 4, seed=5))
        x = randn(2, 4, seed=4)
        torch.testing.assert_close(tree(m)(m, x), eager_branchy(m, x))
        assert recorder.captures == 5  # segment 0 and the branch taken, afresh
        assert len(tree(m).segments) == 2


def test_tree_that_cannot_capture_a_segment_runs_without_graphs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rec = Recorder()

    def record(runner, run):
        if rec.captures == 1:  # the second segment captured: seg1 or seg2
            raise CaptureFailed("operation not permitted when stream is capturing")
        return rec(runner, run)

    monkeypatch.setattr(CudaGraphRunner, "_record", record)
    m = net()
    with torch.no_grad(), pytest.warns(RuntimeWarning, match="capture of seg1 failed"):
        x = signed(1.0, seed=1)
        torch.testing.assert_close(tree(m)(m, x), eager_branchy(m, x))
    assert tree(m).disabled.startswith("capture of seg1 failed: operation not")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")
        for sign in (1.0, -1.0):
            x = signed(sign, seed=2)
            torch.testing.assert_close(tree(m)(m, x), eager_branchy(m, x))
    assert rec.captures == 1 and tree(m).segments == []


def test_tree_with_an_output_that_is_an_argument_runs_without_graphs(
    recorder: Recorder,
) -> None:
    def first(x):
        return (x.sum() > 0,)

    def same(x):
        return x

    def double(x):
        return x * 2

    def passes_on(graphs, x):
        (gt,) = graphs.run(first, x)
        return graphs.run(same if gt else double, x)

    x = torch.ones(3)
    with pytest.warns(RuntimeWarning, match="an output is an argument's memory"):
        out = runtime_shim.cuda_graph_tree(passes_on, passes_on)(x)
    assert out is x  # the caller's tensor, as eager
    torch.testing.assert_close(
        runtime_shim.cuda_graph_tree(passes_on, passes_on)(-x), -x * 2
    )


def test_tree_runs_without_graphs_as_the_variant_does() -> None:
    m = net()
    x = signed(-1.0, seed=1)
    with torch.no_grad():
        torch.testing.assert_close(tree(m).run_without_graph(m, x), eager_branchy(m, x))
    assert tree(m).captures == 0
