"""A linear layer's bias and activation applied by cuBLAS as it stores the product."""

from __future__ import annotations

import torch

__all__ = ["addmm_activation", "efficient_attention", "efficient_attention_backward"]


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


def efficient_attention(
    q, k, v, bias, compute_log_sumexp, dropout_p, is_causal, scale=None
):
    """`aten._scaled_dot_product_efficient_attention`: (out, logsumexp, seed,
    offset). On CUDA tensors the op itself; on others (a cuda variant's code run
    on CPU tensors, Triton interpreting its kernels) the CPU's flash attention,
    its logsumexp padded as the CUDA kernel pads it (to a multiple of 32 rows)."""
    aten = torch.ops.aten
    if q.is_cuda:
        return aten._scaled_dot_product_efficient_attention(
            q, k, v, bias, compute_log_sumexp, dropout_p, is_causal, scale=scale
        )
    out, lse = aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, dropout_p, is_causal, attn_mask=bias, scale=scale
    )
    rows = lse.shape[-1]
    padded = lse.new_zeros((*lse.shape[:-1], (rows + 31) // 32 * 32))
    padded[..., :rows] = lse
    empty = torch.empty((), dtype=torch.int64)
    return out, padded, empty, empty


def efficient_attention_backward(
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
    """`aten._scaled_dot_product_efficient_attention_backward`; on other than
    CUDA tensors, the CPU flash attention's backward (see `efficient_attention`)."""
    aten = torch.ops.aten
    if q.is_cuda:
        return aten._scaled_dot_product_efficient_attention_backward(
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
            is_causal,
            scale=scale,
        )
    dq, dk, dv = aten._scaled_dot_product_flash_attention_for_cpu_backward(
        grad,
        q,
        k,
        v,
        out,
        lse[..., : q.shape[-2]].contiguous(),
        dropout_p,
        is_causal,
        attn_mask=bias,
        scale=scale,
    )
    dbias = None
    if bias is not None and grad_input_mask[3]:
        raise NotImplementedError("the gradient of an attention bias off CUDA")
    return dq, dk, dv, dbias
