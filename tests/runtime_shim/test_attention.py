"""runtime_shim.attention and attention_backward (Note [Attention kernels at run
time]) against eager PyTorch's `scaled_dot_product_attention` and its autograd: the
output, the gradients of q, k and v, and the inputs unchanged after the call. On a
GPU (`TRANSPILE_TEST_DEVICE=cuda`) each kernel the dispatcher can pick is forced in
turn; elsewhere the CPU path runs."""

from __future__ import annotations

import re
from contextlib import nullcontext

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import runtime_shim
from tests.devices import REAL_GPU

DEVICE = "cuda" if REAL_GPU else "cpu"
KERNELS = (
    [
        SDPBackend.CUDNN_ATTENTION,
        SDPBackend.FLASH_ATTENTION,
        SDPBackend.EFFICIENT_ATTENTION,
        SDPBackend.MATH,
    ]
    if REAL_GPU
    else [None]
)
EFFICIENT = int(SDPBackend.EFFICIENT_ATTENTION)
DTYPES = (
    [torch.float32, torch.bfloat16, torch.float16]
    if REAL_GPU
    else [torch.float32, torch.bfloat16]  # what the CPU's flash attention takes
)
TOLERANCE = {torch.float32: 2e-4, torch.bfloat16: 3e-2, torch.float16: 5e-3}


def _qkv(dtype: torch.dtype, rows: int, split: bool):
    """q, k, v of shape [2, 3, rows, 64]: views of one [2, rows, 3 * 192] tensor as
    a GPT's attention makes them (`split`), or three [B, H, M, K]-contiguous
    tensors."""
    generator = torch.Generator().manual_seed(rows)
    if split:
        qkv = torch.randn(2, rows, 3 * 192, generator=generator)
        qkv = qkv.to(DEVICE, dtype)
        return [t.view(2, rows, 3, 64).transpose(1, 2) for t in qkv.split(192, dim=2)]
    return [
        torch.randn(2, 3, rows, 64, generator=generator).to(DEVICE, dtype)
        for _ in range(3)
    ]


@pytest.mark.parametrize("kernel", KERNELS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("rows, split", [(128, True), (100, False)])
@pytest.mark.parametrize("causal", [True, False])
def test_attention_and_its_backward_equal_eager(kernel, dtype, rows, split, causal):
    q, k, v = _qkv(dtype, rows, split)
    before = [t.clone() for t in (q, k, v)]
    grad = torch.randn(2, rows, 3, 64, generator=torch.Generator().manual_seed(1))
    grad = grad.to(DEVICE, dtype).transpose(1, 2)
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    expected = torch.nn.functional.scaled_dot_product_attention(
        *leaves, is_causal=causal
    )
    expected.backward(grad.double())

    context = sdpa_kernel([kernel]) if kernel is not None else nullcontext()
    with context:
        try:
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        except RuntimeError as refused:  # the kernel allowed does not take them
            with pytest.raises(
                RuntimeError, match=re.escape(str(refused).splitlines()[0])
            ):
                runtime_shim.attention(q, k, v, None, True, 0.0, causal)
            return
        out, lse, seed, offset = runtime_shim.attention(
            q, k, v, None, True, 0.0, causal
        )
        picked = torch._fused_sdp_choice(q, k, v, None, 0.0, causal)
        grads = runtime_shim.attention_backward(
            grad,
            q,
            k,
            v,
            None,
            out,
            lse,
            seed,
            offset,
            0.0,
            [True, True, True, False],
            causal,
        )

    if REAL_GPU:  # the kernel run is the dispatcher's pick, named for the backward
        fused = {int(b) for b in KERNELS if b is not SDPBackend.MATH}
        assert int(seed) == (picked if picked in fused else EFFICIENT)
    heads, width = 3, 64
    # laid out as the memory-efficient kernel lays it out: rows before heads
    assert out.stride() == (rows * heads * width, width, heads * width, 1)
    tolerance = TOLERANCE[dtype]
    torch.testing.assert_close(
        out.double(), expected.detach(), atol=tolerance, rtol=tolerance
    )
    for got, leaf in zip(grads[:3], leaves):
        assert got.shape == leaf.shape and got.dtype == dtype
        torch.testing.assert_close(
            got.double(), leaf.grad, atol=4 * tolerance, rtol=4 * tolerance
        )
    assert grads[3] is None
    for tensor, copy in zip((q, k, v), before):
        assert torch.equal(tensor, copy)


def test_attention_takes_no_mask():
    q, k, v = _qkv(torch.float32, 32, False)
    with pytest.raises(ValueError, match="no mask"):
        runtime_shim.attention(q, k, v, torch.zeros(32, 32), True, 0.0, False)


@pytest.mark.parametrize("rows, split", [(128, True), (100, False)])
@pytest.mark.parametrize("causal", [True, False])
def test_attention_with_dropout_draws_as_eager(rows, split, causal):
    """With dropout the shim draws eager's mask after the same seed (on a GPU the
    memory-efficient kernel, eager's pick for f32; elsewhere eager's own call), and
    its backward draws it again: the output and the gradients of eager's autograd,
    the inputs unchanged."""
    q, k, v = _qkv(torch.float32, rows, split)
    before = [t.clone() for t in (q, k, v)]
    grad = torch.randn(2, rows, 3, 64, generator=torch.Generator().manual_seed(2))
    grad = grad.to(DEVICE).transpose(1, 2)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    context = (
        sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]) if REAL_GPU else nullcontext()
    )
    torch.manual_seed(5)
    with context:
        expected = torch.nn.functional.scaled_dot_product_attention(
            *leaves, dropout_p=0.3, is_causal=causal
        )
    expected.backward(grad)
    torch.manual_seed(5)
    out, lse, seed, offset = runtime_shim.attention(q, k, v, None, True, 0.3, causal)
    torch.manual_seed(11)  # the backward draws from what the forward saved
    grads = runtime_shim.attention_backward(
        grad, q, k, v, None, out, lse, seed, offset, 0.3, [True] * 3 + [False], causal
    )
    torch.testing.assert_close(out, expected.detach(), atol=2e-5, rtol=2e-5)
    for got, leaf in zip(grads[:3], leaves):
        torch.testing.assert_close(got, leaf.grad, atol=1e-4, rtol=1e-4)
    assert grads[3] is None
    for tensor, copy in zip((q, k, v), before):
        assert torch.equal(tensor, copy)


@pytest.mark.parametrize(
    "shim, op",
    [
        ("attention", "_scaled_dot_product_efficient_attention"),
        ("attention_backward", "_scaled_dot_product_efficient_attention_backward"),
    ],
)
def test_the_shim_takes_the_ops_arguments_and_defaults(shim: str, op: str) -> None:
    """Generated code calls the shim as the op's node was recorded, which leaves
    out arguments equal to their defaults (ViT's attention, not causal, passes no
    `dropout_p` or `is_causal`): each of the op's arguments, in order, with its
    default."""
    import inspect

    import runtime_shim

    schema = getattr(torch.ops.aten, op).default._schema
    params = list(inspect.signature(getattr(runtime_shim, shim)).parameters.values())
    assert len(params) == len(schema.arguments)
    for p, a in zip(params, schema.arguments):
        if a.has_default_value():
            assert p.default == a.default_value, (shim, a.name)
        else:
            assert p.default is inspect.Parameter.empty, (shim, a.name)
