"""Fusion in the GPT-2 block (examples/gpt_block.py::Block), on both backends.

With n_embd=64, n_head=4 and x=f32[2,16,64] the block is 4 kernels around 5 extern
calls (the c_attn linear with its bias, SDPA, and the linears of attn.c_proj,
mlp.c_fc, mlp.c_proj, without theirs):

    1. fused_native_layer_norm            ln_1(x)
    2. fused_addmm_add_native_layer_norm  attn.c_proj bias, + x, ln_2: writes both
    3. fused_addmm_gelu                   mlp.c_fc bias + GELU
    4. fused_addmm_add                    mlp.c_proj bias + the residual from 2

`y.transpose(1, 2).contiguous()` costs no kernel: attention's output is laid out so
that the transpose is contiguous already (see ir.ops.EXTERN_LAYOUT).

Checked twice: on the compiler's `Program` (no dependence on text layout), and on the
checked-in generated module: the `_cpp.function(...)` calls of `_cpu_0` and the
`_triton.` launches of `_cuda_0`, with the kernels' own text. Fewer kernels is
welcome: update the counts here. More, or a split layernorm, is a regression.
"""

from __future__ import annotations

import ast
import inspect
import re
from dataclasses import dataclass

import pytest

from tests.helpers import ROOT, load_cases
from transpiler.frontend.loader import resolve
from transpiler.frontend.source import SourceCache
from transpiler.frontend.trace import instantiate, trace
from transpiler.ir.graph import iter_refs
from transpiler.ir.program import (
    ExternCall,
    Kernel,
    KernelCall,
    KernelNames,
    Program,
    Stmt,
)
from transpiler.pipeline import lower, optimize

SOURCE = "examples/gpt_block.py::Block"
KERNELS = 4
LAYERNORM = "native_layer_norm"

# ------------------------------------------------------------------ the compiler's view


@dataclass(frozen=True)
class Launch:
    """One kernel call: its kernel and the wrapper names it reads and writes."""

    kernel: Kernel
    reads: tuple[str, ...]
    writes: tuple[str, ...]

    def __repr__(self) -> str:
        return (
            f"{self.kernel.name}({', '.join(self.reads)} -> {', '.join(self.writes)})"
        )

    def reductions(self) -> list[str]:
        body = self.kernel.body
        return [s.reduce for s in body if isinstance(s, Stmt) and s.op == "reduce"]

    def ops(self) -> set[str]:
        return {s.op for s in self.kernel.body if isinstance(s, Stmt)}


def lower_block(device: str) -> Program:
    """The Program of the block's `device` variant, as `transpile` builds it."""
    case = next(c for c in load_cases() if c.source == SOURCE and c.device == device)
    resolved = resolve(SOURCE, ROOT)
    module = instantiate(resolved.obj, dict(case.init), None, ROOT)
    traced = trace(resolved.obj, module, case.variant, SourceCache(ROOT))
    assert traced.graph is not None, traced.fallback
    return lower(optimize(traced.graph), KernelNames())


def launches(program: Program) -> list[Launch]:
    kernels = {k.name: k for k in program.kernels}
    found = []
    for step in program.steps:
        if isinstance(step, KernelCall):
            kernel = kernels[step.kernel]
            n = len(kernel.inputs)
            found.append(Launch(kernel, step.args[:n], step.args[n:]))
    return found


def feeds(program: Program, names: tuple[str, ...]) -> set[str]:
    """`names` and all they are computed from through extern calls and views, up to
    (and including) kernel outputs, inputs and parameters."""
    externs = {s.out: s for s in program.steps if isinstance(s, ExternCall)}
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            step = externs.get(name)
            if step is not None:
                todo += [ref.name for ref in iter_refs((step.args, step.kwargs))]
    return seen


def only(items: list, what: str):
    assert len(items) == 1, f"expected one {what}, got {len(items)}: {items}"
    return items[0]


def reading(found: list[Launch], name: str) -> Launch:
    return only(
        [launch for launch in found if name in launch.reads], f"reader of {name}"
    )


@pytest.fixture(scope="module", params=["cpu", "cuda"])
def program(request: pytest.FixtureRequest) -> Program:
    return lower_block(request.param)


def test_kernel_count(program: Program) -> None:
    found = launches(program)
    names = [launch.kernel.name for launch in found]
    assert len(found) == KERNELS, names
    assert len(program.kernels) == KERNELS, names  # all distinct
    externs = sorted(
        s.target for s in program.steps if isinstance(s, ExternCall) and not s.is_view
    )
    # c_attn keeps its bias (no pointwise consumer to take it); each matmul is one
    # `linear` call, not a view, a transpose, a matmul and a view back
    assert externs == ["aten.linear.default"] * 4 + [
        "aten.scaled_dot_product_attention.default"
    ]
    linears = [
        s
        for s in program.steps
        if isinstance(s, ExternCall) and s.target == "aten.linear.default"
    ]
    assert [len(s.args) for s in linears] == [3, 2, 2, 2]


def test_each_layernorm_is_one_kernel(program: Program) -> None:
    found = launches(program)
    for ln in ("ln_1", "ln_2"):
        launch = reading(found, f"{ln}_weight")
        assert f"{ln}_bias" in launch.reads
        assert LAYERNORM in launch.kernel.name
        assert (launch.kernel.xnumel, launch.kernel.rnumel) == (32, 64)
        # the mean, then the squared deviations and the deviations (Note [Variance])
        assert launch.reductions() == ["sum", "sum", "sum"], "mean and variance"
        assert "rsqrt" in launch.ops()
    # no other kernel reduces: each layernorm is whole in its kernel
    reducing = [launch.kernel.name for launch in found if launch.reductions()]
    assert len(reducing) == 2, reducing


def test_bias_and_gelu_are_one_kernel(program: Program) -> None:
    found = launches(program)
    gelu = reading(found, "mlp_c_fc_bias")
    assert "gelu" in gelu.kernel.name
    assert "tanh" in gelu.ops()  # F.gelu(approximate="tanh")
    assert "mlp_c_fc_weight" in feeds(program, gelu.reads), "reads c_fc's matmul"
    # its output goes straight (through views only) into the mlp.c_proj matmul
    last = reading(found, "mlp_c_proj_bias")
    assert set(gelu.writes) <= feeds(program, last.reads)
    assert "mlp_c_proj_weight" in feeds(program, last.reads)


def test_residual_add_fuses_into_the_next_layernorm(program: Program) -> None:
    found = launches(program)
    (x,) = program.inputs
    ln_2 = reading(found, "ln_2_weight")
    assert x in ln_2.reads, "the block input, for x + attn(...)"
    assert "attn_c_proj_bias" in ln_2.reads
    assert "attn_c_proj_weight" in feeds(program, ln_2.reads), "the attention output"
    assert "add" in ln_2.ops()
    # it also writes the residual sum, which the last kernel adds to the MLP output
    last = reading(found, "mlp_c_proj_bias")
    only([n for n in ln_2.writes if n in last.reads], "residual")
    assert [ref.name for ref in iter_refs(program.outputs)] == list(last.writes)


# ------------------------------------------------------- the checked-in generated code


@dataclass(frozen=True)
class Call:
    """A kernel launch in a generated variant function."""

    kernel: str
    args: tuple[str, ...]  # wrapper names, in the kernel's parameter order


def _name(node: ast.expr) -> str:
    """`x` for `x` and for `x.data_ptr()`."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        node = node.func.value
    assert isinstance(node, ast.Name), ast.dump(node)
    return node.id


def _launch(node: ast.Call, backend: str) -> Call | None:
    func = node.func
    if backend == "cpu":  # _cpp.function("cpp_k", "ppp")(a.data_ptr(), ...)
        if (
            isinstance(func, ast.Call)
            and isinstance(func.func, ast.Attribute)
            and func.func.attr == "function"
            and isinstance(func.func.value, ast.Name)
            and func.func.value.id == "_cpp"
        ):
            return Call(func.args[0].value, tuple(_name(a) for a in node.args))
    else:  # _triton.triton_k[grid](a, ..., XBLOCK=...)
        if (
            isinstance(func, ast.Subscript)
            and isinstance(func.value, ast.Attribute)
            and isinstance(func.value.value, ast.Name)
            and func.value.value.id == "_triton"
        ):
            return Call(func.value.attr, tuple(_name(a) for a in node.args))
    return None


def generated_calls(backend: str) -> list[Call]:
    import generated.gpt_block as module

    source = inspect.getsource(module.__dict__[f"_{backend}_0"])
    nodes = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)]
    nodes.sort(key=lambda n: (n.lineno, n.col_offset))
    return [c for c in (_launch(n, backend) for n in nodes) if c is not None]


def kernel_text(backend: str, name: str) -> tuple[list[str], str]:
    """A kernel's parameter names and its body's text, from generated/."""
    if backend == "cpu":
        text = (ROOT / "generated" / "gpt_block.cpp").read_text()
        for chunk in text.split('extern "C" void ')[1:]:
            if chunk.startswith(name + "("):
                params = chunk[len(name) + 1 : chunk.index(")")]
                body = chunk[chunk.index("{") :]
                return re.findall(r"(\w+)\s*(?:,|$)", params), body
        raise AssertionError(f"no C++ kernel {name}")
    text = (ROOT / "generated" / "gpt_block_triton.py").read_text()
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            body = "\n".join(ast.get_source_segment(text, s) or "" for s in node.body)
            return [a.arg for a in node.args.args], body
    raise AssertionError(f"no Triton kernel {name}")


# prefix, a reduction's text, the rsqrt's, and how a layer norm's kernel reduces
# its row: the mean, then the squared deviations and the deviations (Note
# [Variance]), in three reductions, or in C++ the last two in one helper
BACKENDS = {
    "cpu": ("cpp_", "reduction(+:", "std::sqrt", 1, "row_spread<float"),
    "cuda": ("triton_", "tl.sum(", "tl.rsqrt(", 3, "tl.sum("),
}


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_generated_kernels(backend: str) -> None:
    prefix, reduction, rsqrt, reductions, spread = BACKENDS[backend]
    calls = generated_calls(backend)
    assert len(calls) == KERNELS, calls
    assert all(c.kernel.startswith(prefix) for c in calls), calls

    norms = [c for c in calls if LAYERNORM in c.kernel]
    assert len(norms) == 2, calls
    ln_1, ln_2 = (
        only([c for c in norms if f"{ln}_weight" in c.args], ln)
        for ln in ("ln_1", "ln_2")
    )
    assert {"x", "ln_1_weight", "ln_1_bias"} <= set(ln_1.args)

    gelu = only([c for c in calls if "gelu" in c.kernel], "gelu kernel")
    assert "mlp_c_fc_bias" in gelu.args
    assert only([c for c in calls if "mlp_c_fc_bias" in c.args], "c_fc bias") == gelu

    # ln_2's kernel loads the block input and the attention projection: the residual
    # add is inside it, before its mean and variance
    assert {"x", "attn_c_proj_bias", "ln_2_weight", "ln_2_bias"} <= set(ln_2.args)
    params, body = kernel_text(backend, ln_2.kernel)
    bound = dict(zip(ln_2.args, params))
    for name in ("x", "attn_c_proj_bias"):
        assert re.search(rf"\b{bound[name]}\b", body), f"{name} is not loaded"
    assert body.count(reduction) == reductions and spread in body, body
    assert rsqrt in body
    for norm in norms:
        norm_body = kernel_text(backend, norm.kernel)[1]
        assert norm_body.count(reduction) == reductions and spread in norm_body
    others = [c for c in calls if c not in norms]
    assert all(reduction not in kernel_text(backend, c.kernel)[1] for c in others)


def test_generated_launches_match_the_program() -> None:
    """Both backends launch the Program's kernels, in order, on the same buffers."""
    found = launches(lower_block("cpu"))
    for backend, prefix in (("cpu", "cpp_"), ("cuda", "triton_")):
        calls = generated_calls(backend)
        assert [c.kernel for c in calls] == [prefix + f.kernel.name for f in found]
        assert [c.args for c in calls] == [f.reads + f.writes for f in found]
