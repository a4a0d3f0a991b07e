"""Checks of data that generated kernels cannot raise on: indices in range.

A kernel that loads a tensor at indices it loaded masks the load to the range and
cannot raise; generated code checks the indices apart (a reduction to one bool) and
calls `check_index` with the result and eager's message. On the CPU it raises what
eager raises: IndexError for `x[idx]`, embedding, nll_loss and index_copy, whose
messages start with "index", "Target" or "index_copy_():", RuntimeError otherwise
(gather's). On a GPU it is a
device-side assert, as eager's own check is there.
"""

from __future__ import annotations

import torch

INDEX_ERROR_PREFIXES = ("index ", "Target ", "index_copy_(): ")


def check_index(ok: torch.Tensor, message: str) -> None:
    if not ok.is_cpu:  # `ok.device.type` costs a microsecond
        torch._assert_async(ok, message)
    elif not bool(ok):
        error = IndexError if message.startswith(INDEX_ERROR_PREFIXES) else RuntimeError
        raise error(message)
