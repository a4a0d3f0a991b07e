"""A linear layer's bias and activation applied by cuBLAS as it stores the product."""

from __future__ import annotations

import torch

__all__ = ["addmm_activation"]


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
