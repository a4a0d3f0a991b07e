"""runtime_shim.TritonKernel: the first launch of each specialization goes through
`JITFunction.run`; later ones call the compiled kernel's launcher directly, with the
arguments `JITFunction.run` would pass it. A fake JIT function stands in for Triton
(no GPU here); the real path is checked on a GPU by benchmarks/launch_overhead.py.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from runtime_shim import triton_launch


class FakeCompiled:
    def __init__(self, log: list) -> None:
        self.log = log
        self.function = "cu_function"
        self.packed_metadata = "metadata"

    def run(self, *args) -> None:
        self.log.append(("launcher", args))


class FakeJIT:
    """`fn[grid](*args, **kwargs)` as Triton >= 3.4 has it: returns the compiled
    kernel, after launching it."""

    arg_names = ("in_ptr0", "out_ptr0", "XBLOCK")

    def __init__(self) -> None:
        self.log: list = []
        self.kernels: dict = {}

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            self.log.append(("jit", grid, args, kwargs))
            return self.kernels.setdefault(len(self.kernels), FakeCompiled(self.log))

        return run


@pytest.fixture
def fake_triton(monkeypatch: pytest.MonkeyPatch):
    knobs = SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None)
    monkeypatch.setattr(triton_launch, "_runtime_knobs", lambda: (knobs, FakeJIT))
    monkeypatch.setattr(triton_launch, "_current_device", lambda: 0)
    monkeypatch.setattr(triton_launch, "_current_stream", lambda device: 1234)
    return knobs


def kinds(log: list) -> list[str]:
    return [entry[0] for entry in log]


def test_later_launches_skip_the_jit(fake_triton) -> None:
    fn = FakeJIT()
    kernel = triton_launch.TritonKernel(fn)
    x, y = torch.zeros(64), torch.zeros(64)
    for _ in range(3):
        kernel[(4,)](x, y, XBLOCK=16, num_warps=2)
    assert kinds(fn.log) == ["jit", "launcher", "launcher"]
    # grid padded to 3D, the stream, handles, no metadata or hooks, then every
    # argument in signature order: tensors as their addresses, constexprs included,
    # options not
    assert fn.log[1][1] == (
        4, 1, 1, 1234, "cu_function", "metadata", None, None, None,
        x.data_ptr(), y.data_ptr(), 16,
    )  # fmt: skip


def test_each_specialization_compiles_through_the_jit(fake_triton) -> None:
    fn = FakeJIT()
    kernel = triton_launch.TritonKernel(fn)
    base = torch.zeros(64)
    kernel[(1,)](base, base, XBLOCK=16)
    kernel[(1,)](base[1:], base, XBLOCK=16)  # misaligned: another specialization
    kernel[(1,)](base.double(), base, XBLOCK=16)  # another dtype
    kernel[(1,)](base, base, XBLOCK=32)  # another constexpr
    assert kinds(fn.log) == ["jit"] * 4
    kernel[(1,)](base[1:], base, XBLOCK=16)
    assert kinds(fn.log)[-1] == "launcher"


def test_hooks_send_every_launch_through_the_jit(fake_triton) -> None:
    fn = FakeJIT()
    kernel = triton_launch.TritonKernel(fn)
    x = torch.zeros(8)
    kernel[(1,)](x, x, XBLOCK=8)
    fake_triton.launch_enter_hook = print  # a profiler is watching launches
    kernel[(1,)](x, x, XBLOCK=8)
    assert kinds(fn.log) == ["jit", "jit"]


def test_an_empty_hook_chain_is_no_hook(fake_triton) -> None:
    """Triton >= 3.5 keeps an empty `HookChain` where a hook would go."""
    fake_triton.launch_enter_hook = SimpleNamespace(calls=[])
    fake_triton.launch_exit_hook = SimpleNamespace(calls=[])
    fn = FakeJIT()
    kernel = triton_launch.TritonKernel(fn)
    x = torch.zeros(8)
    kernel[(1,)](x, x, XBLOCK=8)
    kernel[(1,)](x, x, XBLOCK=8)
    assert kinds(fn.log) == ["jit", "launcher"]
    fake_triton.launch_exit_hook.calls.append(print)
    kernel[(1,)](x, x, XBLOCK=8)
    assert kinds(fn.log)[-1] == "jit"


def test_defaulted_arguments_stay_with_the_jit(fake_triton) -> None:
    fn = FakeJIT()
    kernel = triton_launch.TritonKernel(fn)
    x = torch.zeros(8)
    for _ in range(2):
        kernel[(1,)](x, x)  # XBLOCK left to its default: Triton binds it
    assert kinds(fn.log) == ["jit", "jit"]


def test_other_callables_always_take_their_own_path() -> None:
    """An interpreted kernel (TRITON_INTERPRET=1) or anything else not a JIT
    function is called as `fn[grid](...)` every time."""
    calls = []

    class Interpreted:
        def __getitem__(self, grid):
            return lambda *a, **k: calls.append(grid)

    kernel = triton_launch.TritonKernel(Interpreted())
    kernel[(2,)](1)
    kernel[(2,)](1)
    assert calls == [(2,), (2,)]


def test_kernels_are_wrapped_once() -> None:
    module = SimpleNamespace(k=object())
    kernels = triton_launch.TritonKernels(module)
    assert kernels.k is kernels.k and kernels.k.fn is module.k


# Note [torch's launcher]: later launches through torch._C._StaticCudaLauncher


class FakeStaticLauncher:
    def __init__(self, log: list, fail: bool = False) -> None:
        self.log = log
        self.fail = fail

    def _launch_kernel(self, *args) -> None:
        if self.fail:
            raise RuntimeError("too many arguments")
        self.log.append(("static", args))


class FakeStaticJIT(FakeJIT):
    """A kernel `(in_ptr0, n, out_ptr0, XBLOCK: constexpr)` whose compiled form
    has the metadata torch's launcher needs; `constants` as Triton specialized."""

    arg_names = ("in_ptr0", "n", "out_ptr0", "XBLOCK")

    def __init__(self, constants=(), **metadata) -> None:
        super().__init__()
        self.constants = {name: 1 for name in constants}
        self.metadata = dict(
            num_warps=4, shared=128, global_scratch_size=0, profile_scratch_size=0
        )
        self.metadata.update(metadata)

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            self.log.append(("jit", grid, args, kwargs))
            kernel = FakeCompiled(self.log)
            kernel.metadata = SimpleNamespace(**self.metadata)
            signature = {"in_ptr0": "*fp32", "n": "i32", "out_ptr0": "*fp32"}
            kernel.src = SimpleNamespace(
                fn=self,
                signature={**signature, "XBLOCK": "constexpr"},
                constants=self.constants,
            )
            return kernel

        return run


@pytest.fixture
def static_launcher(fake_triton, monkeypatch: pytest.MonkeyPatch):
    fn = FakeStaticJIT()
    launcher = FakeStaticLauncher(fn.log)
    monkeypatch.setattr(torch._C, "_StaticCudaLauncher", launcher, raising=False)
    monkeypatch.setattr(torch.version, "hip", None)
    return fn, launcher


def launch_three(fn) -> tuple[torch.Tensor, torch.Tensor]:
    kernel = triton_launch.TritonKernel(fn)
    x, y = torch.zeros(64), torch.zeros(64)
    for _ in range(3):
        kernel[(4, 2)](x, 64, y, XBLOCK=16, num_warps=4)
    return x, y


def test_later_launches_go_through_torchs_launcher(static_launcher) -> None:
    fn, _ = static_launcher
    x, y = launch_three(fn)
    assert kinds(fn.log) == ["jit", "static", "static"]
    # function, grid, warps and shared memory from the metadata, argument types
    # (pointer, i32, pointer, then a null pointer per scratch buffer), arguments
    # without the constexpr, the stream
    assert fn.log[1][1] == (
        "cu_function", 4, 2, 1, 4, 128, "OiOOO",
        (x.data_ptr(), 64, y.data_ptr(), None, None), 1234,
    )  # fmt: skip


def test_ints_specialized_as_constants_are_not_passed(
    static_launcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    fn = FakeStaticJIT(constants=("n",))
    monkeypatch.setattr(torch._C, "_StaticCudaLauncher", FakeStaticLauncher(fn.log))
    x, y = launch_three(fn)
    assert fn.log[-1][1][6:8] == ("OOOO", (x.data_ptr(), y.data_ptr(), None, None))


@pytest.mark.parametrize(
    "metadata",
    [
        {"global_scratch_size": 256},  # scratch space the kernel uses
        {"launch_pdl": True},
        {"launch_cooperative_grid": True},
        {"num_ctas": 2},
    ],
)
def test_kernels_torchs_launcher_cannot_take_keep_tritons(
    metadata, fake_triton, monkeypatch: pytest.MonkeyPatch
) -> None:
    fn = FakeStaticJIT(**metadata)
    monkeypatch.setattr(
        torch._C, "_StaticCudaLauncher", FakeStaticLauncher(fn.log), raising=False
    )
    launch_three(fn)
    assert kinds(fn.log) == ["jit", "launcher", "launcher"]


def test_a_launch_torchs_launcher_refuses_keeps_tritons_from_then_on(
    fake_triton, monkeypatch: pytest.MonkeyPatch
) -> None:
    fn = FakeStaticJIT()
    monkeypatch.setattr(
        torch._C, "_StaticCudaLauncher", FakeStaticLauncher(fn.log, fail=True),
        raising=False,
    )  # fmt: skip
    launch_three(fn)
    assert kinds(fn.log) == ["jit", "launcher", "launcher"]


def test_without_torchs_launcher_tritons_is_used(
    fake_triton, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(torch._C, "_StaticCudaLauncher", raising=False)
    fn = FakeStaticJIT()
    launch_three(fn)
    assert kinds(fn.log) == ["jit", "launcher", "launcher"]
