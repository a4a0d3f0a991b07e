"""A linear layer's bias and activation applied by cuBLAS as it stores the product."""

from __future__ import annotations

import torch
from torch.nn.attention import SDPBackend

__all__ = ["addmm_activation", "attention", "attention_backward"]


def addmm_activation(
    bias: torch.Tensor, mat1: torch.Tensor, mat2: torch.Tensor, use_gelu: bool
) -> torch.Tensor:
    """`gelu(bias + mat1 @ mat2, approximate="tanh")`, or `relu(...)`.

    On CUDA tensors this is one `torch._addmm_activation` call: cuBLASLt applies the
    bias and the activation to the accumulator before storing it (or, for shapes it
    does not take, ATen runs `addmm` and then the same activation in place). On other
    devices that op's GELU is the exact one, so the tanh form is computed here."""
    if mat1.is_cuda:
        return torch._addmm_activation(bias, mat1, mat2, use_gelu=use_gelu)
    out = torch.addmm(bias, mat1, mat2)
    if use_gelu:
        return torch.nn.functional.gelu(out, approximate="tanh")
    return out.relu_()


# Note [Attention kernels at run time]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A training variant's attention is traced as the memory-efficient kernel (its
# results' shapes, its backward's inputs), but which kernel is fastest depends on
# the GPU and the dtype, known only where the module runs: on an H100, half
# precision runs cuDNN's attention in eager PyTorch and torch.compile, twice as
# fast backward as the memory-efficient kernel. So `attention` asks PyTorch's own
# dispatcher (`torch._fused_sdp_choice`, what `F.scaled_dot_product_attention`
# asks) and runs its pick: cuDNN, FlashAttention, or the memory-efficient kernel
# otherwise. Its output is laid out as the traced kernel lays it out. Without
# dropout the kernels' random-number state is not read, so the seed's place in
# the results holds the kernel run, an `SDPBackend` value in a CPU tensor, and the
# offset's place the kernel's own seed tensor; `attention_backward` runs that
# kernel's backward with the logsumexp it returned (its own shape), passing it the
# seed tensor for its seed and offset (unread, but checked for their device).
# With dropout it runs the memory-efficient kernel, the traced one, whose seed and
# offset its backward reads to draw the same mask (eager's pick for f32, so the
# same masks as eager's). On other than CUDA tensors dropout is eager's own call,
# and the backward recomputes it with autograd from the CPU generator's state
# before it, saved in the offset's place.
_CUDNN = int(SDPBackend.CUDNN_ATTENTION)
_FLASH = int(SDPBackend.FLASH_ATTENTION)
_EFFICIENT = int(SDPBackend.EFFICIENT_ATTENTION)
_KERNELS = {}  # SDPBackend value -> its tag tensor


def _kernel_tag(kernel: int) -> torch.Tensor:
    tag = _KERNELS.get(kernel)
    if tag is None:
        tag = _KERNELS[kernel] = torch.tensor(kernel, dtype=torch.int64)
    return tag


def attention(
    q, k, v, bias, compute_log_sumexp, dropout_p=0.0, is_causal=False, scale=None
):
    """`aten._scaled_dot_product_efficient_attention`'s arguments and results
    (out, logsumexp, seed, offset), without a mask, computed by the kernel
    PyTorch's dispatcher picks, or with dropout by the memory-efficient kernel
    (Note [Attention kernels at run time]). On other than CUDA tensors (a cuda
    variant's code run on CPU tensors, Triton interpreting its kernels) the CPU's
    flash attention, its logsumexp padded as the memory-efficient kernel pads it
    (to a multiple of 32 rows)."""
    aten = torch.ops.aten
    if bias is not None:
        raise ValueError("runtime_shim.attention takes no mask")
    if dropout_p and not q.is_cuda:
        return _cpu_attention_with_dropout(q, k, v, dropout_p, is_causal, scale)
    if dropout_p:
        out, lse, seed, offset = aten._scaled_dot_product_efficient_attention(
            q, k, v, None, True, dropout_p, is_causal, scale=scale
        )
        return _rows_before_heads(out), lse, seed, offset
    if not q.is_cuda:
        out, lse = aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, is_causal, scale=scale
        )
        rows = lse.shape[-1]
        padded = lse.new_zeros((*lse.shape[:-1], (rows + 31) // 32 * 32))
        padded[..., :rows] = lse
        tag = _kernel_tag(int(SDPBackend.MATH))  # not read off CUDA
        return _rows_before_heads(out), padded, tag, tag
    kernel = torch._fused_sdp_choice(q, k, v, None, 0.0, is_causal, scale=scale)
    if kernel == _CUDNN:
        result = aten._scaled_dot_product_cudnn_attention(
            q, k, v, None, True, 0.0, is_causal, scale=scale
        )
    elif kernel == _FLASH:
        result = aten._scaled_dot_product_flash_attention(
            q, k, v, 0.0, is_causal, scale=scale
        )
    else:  # the traced kernel, also where the dispatcher would take the math path
        kernel = _EFFICIENT
        result = aten._scaled_dot_product_efficient_attention(
            q, k, v, None, True, 0.0, is_causal, scale=scale
        )
    philox = result[2] if kernel == _EFFICIENT else result[6]
    return _rows_before_heads(result[0]), result[1], _kernel_tag(kernel), philox


def _rows_before_heads(out: torch.Tensor) -> torch.Tensor:
    """`out` [B, H, M, K] laid out as the memory-efficient kernel lays it out (as
    traced): [B, M, H, K]-contiguous. The kernels give that layout for a GPT's q,
    k and v; for others this copies."""
    batch, heads, rows, width = out.shape
    wanted = (rows * heads * width, width, heads * width, 1)
    if all(n == 1 or s == w for n, s, w in zip(out.shape, out.stride(), wanted)):
        return out
    laid_out = out.new_empty((batch, rows, heads, width)).transpose(1, 2)
    return laid_out.copy_(out)


def _cpu_attention_with_dropout(q, k, v, dropout_p, is_causal, scale):
    """Eager's attention with dropout on CPU tensors, and where `attention` returns
    the logsumexp, the generator's state before it (Note [Attention kernels at
    run time]); the logsumexp's place is left empty."""
    state = torch.get_rng_state()
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, dropout_p=dropout_p, is_causal=is_causal, scale=scale
    )
    rows = q.shape[-2]
    lse = q.new_empty((*q.shape[:-2], (rows + 31) // 32 * 32), dtype=torch.float32)
    return _rows_before_heads(out), lse, _kernel_tag(int(SDPBackend.MATH)), state


def _cpu_attention_with_dropout_backward(grad, q, k, v, state, p, is_causal, scale):
    """The gradients of `_cpu_attention_with_dropout` for the mask it drew, drawn
    again from the generator's state it saved."""
    with torch.random.fork_rng(devices=[]), torch.enable_grad():
        torch.set_rng_state(state)
        inputs = tuple(t.detach().requires_grad_() for t in (q, k, v))
        out = torch.nn.functional.scaled_dot_product_attention(
            *inputs, dropout_p=p, is_causal=is_causal, scale=scale
        )
        return torch.autograd.grad(out, inputs, grad)


def attention_backward(
    grad,
    q,
    k,
    v,
    bias,
    out,
    lse,
    seed,
    offset,
    dropout_p,
    grad_input_mask,
    is_causal=False,
    scale=None,
):
    """`aten._scaled_dot_product_efficient_attention_backward`'s arguments and
    results (dq, dk, dv, dbias) for what `attention` returned: the backward of the
    kernel it ran, named by `seed` (Note [Attention kernels at run time]), or on
    other than CUDA tensors the CPU flash attention's backward."""
    aten = torch.ops.aten
    rows, columns = q.shape[-2], k.shape[-2]
    if dropout_p and not q.is_cuda:
        grads = _cpu_attention_with_dropout_backward(
            grad, q, k, v, offset, dropout_p, is_causal, scale
        )
        return (*grads, None)
    if dropout_p:  # the memory-efficient kernel, which drew with seed and offset
        kernel = _EFFICIENT
    else:  # the kernel's tag, its seed tensor for both
        kernel, seed = (int(seed) if q.is_cuda else None), offset
    if kernel is None:
        grads = aten._scaled_dot_product_flash_attention_for_cpu_backward(
            grad,
            q,
            k,
            v,
            out,
            lse[..., :rows].contiguous(),
            0.0,
            is_causal,
            scale=scale,
        )
    elif kernel == _CUDNN:
        grads = aten._scaled_dot_product_cudnn_attention_backward(
            grad,
            q,
            k,
            v,
            out,
            lse,
            offset,
            offset,
            None,
            None,
            None,
            rows,
            columns,
            0.0,
            is_causal,
            scale=scale,
        )
    elif kernel == _FLASH:
        grads = aten._scaled_dot_product_flash_attention_backward(
            grad,
            q,
            k,
            v,
            out,
            lse,
            None,
            None,
            rows,
            columns,
            0.0,
            is_causal,
            offset,
            offset,
            scale=scale,
        )
    else:
        return aten._scaled_dot_product_efficient_attention_backward(
            grad,
            q,
            k,
            v,
            None,
            out,
            lse,
            seed,
            offset,
            dropout_p,
            grad_input_mask,
            is_causal,
            scale=scale,
        )
    return (*grads, None)  # no bias, no gradient of one
