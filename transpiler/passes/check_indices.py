"""Check the indices of the indirect loads kernels compute, as eager's ops do.

Before:  index: f32[4,8,64] = aten.index.Tensor(weight, [ids])
After:   ge = aten.ge.Scalar(ids, -1000);  lt = aten.lt.Scalar(ids, 1000)
         ok = aten.logical_and.default(ge, lt);  all = ... (ok.all())
         aten._assert_async.msg(all, "index out of range in self")
         index: f32[4,8,64] = aten.index.Tensor(weight, [ids])

Note [Indirect loads in range]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
`x[idx]`, `embedding` and `gather` raise on an index out of range (on a GPU, a
device-side assert). A kernel loading `x` at a loaded index masks the load to the
range, so it never reads outside `x`, and cannot raise; so the check is its own:
whether every index is in range, a reduction over the (small) index tensor that
fuses with the comparisons (read once: not along the dimensions it is expanded
along), then `torch._assert_async`, which raises where eager
would (on a GPU asynchronously, as eager's device-side assert does). It runs even
when nothing uses the result (`dce`: `CHECKS_DATA`). Only for the ops kernels
compute (`fuse.gather_ok`); an extern call checks for itself.

The reduction has one result: as one row, one GPU program would walk all the
indices (28 us of a 180 us embedding and layer norm of [128, 512] tokens on an H100,
beside 150 us for the kernel that gathers). So a large index tensor is checked in
parts of at least `CHECK_PART` indices, side by side, and then the parts' results.
"""

from __future__ import annotations

import torch

from transpiler.ir.graph import Graph, Node, Ref, TensorMeta
from transpiler.ir.ops import ATOMIC_TYPES, GATHERS, UNSAFE_INDEX
from transpiler.ir.positions import bounds
from transpiler.passes.decompose import (
    ANY_ALL,
    REDUCTIONS,
    any_all,
    masked_scatter_rows,
    one_per_row,
    put_in_kernel,
)
from transpiler.passes.direct_views import LINKS
from transpiler.passes.fuse import gather_ok, scatter_ok
from transpiler.passes.retrace import SameOp, retrace

every = any_all(ANY_ALL[torch.ops.aten.all.default])  # `all`, as kernels compute it
CHECK_PART = 8192  # indices checked together, at least: one block of a program
CHECK_PARTS_MAX = 1024


# eager's messages (runtime_shim.check_index raises IndexError for those that
# start with "index" or "Target", as eager does, RuntimeError for gather's)
MESSAGES = {
    "aten.index.Tensor": "index out of bounds for dimension {dim} with size {size}",
    "aten.gather.default": "gather: index out of bounds for dimension {dim} with "
    "size {size}",
    "aten.embedding.default": "index out of range in self",
    "aten.index_select.default": "index out of range in self",
    "aten.nll_loss_forward.default": "Target out of bounds",
    **dict.fromkeys(
        ("aten.scatter.value", "aten.scatter.src"),
        "scatter: index out of bounds for dimension {dim} with size {size}",
    ),
    "aten.index_put.default": "index out of bounds for dimension {dim} with size "
    "{size}",
    "aten.index_add.default": "index out of range in self",
    "aten.index_reduce.default": "index out of range in self",
    "aten.index_copy.default": "index_copy_(): index out of bounds for dimension "
    "{dim} with size {size}",
    **dict.fromkeys(
        ("aten.index_fill.int_Scalar", "aten.index_fill.int_Tensor"),
        "index out of bounds for dimension {dim} with size {size}",
    ),
    "aten.scatter_reduce.two": "scatter_reduce: index out of bounds for "
    "dimension {dim} with size {size}",
    "aten.scatter_add.default": "scatter_add: index out of bounds for dimension "
    "{dim} with size {size}",
}

# ops that decompose into an indirect load kernels compute (`x[idx]`, `gather`),
# whose indices must not be negative: (input, dimension, index) of their arguments
DECOMPOSED = {
    "aten.embedding.default": lambda args: (args[0], 0, args[1]),
    "aten.index_select.default": lambda args: (args[0], args[1], args[2]),
    "aten.nll_loss_forward.default": lambda args: (args[0], -1, args[1]),
}


# scatters that decompose into a select kernels compute (decompose.one_per_row),
# or into a scatter that writes or adds (Note [Scatters] in schedule.py), whose
# indices must not be negative, but index_fill's (`WRAPS`), counted from the end
def _first_three(args) -> tuple:  # (input, dimension, index)
    return tuple(args[:3])


SCATTERS = dict.fromkeys(
    (
        "aten.scatter.value",
        "aten.scatter.src",
        "aten.index_add.default",
        "aten.scatter_add.default",
        "aten.index_copy.default",
        "aten.index_fill.int_Scalar",
        "aten.index_fill.int_Tensor",
        "aten.scatter_reduce.two",
        "aten.index_reduce.default",
    ),
    _first_three,
)
WRAPS = ("aten.index_fill.int_Scalar", "aten.index_fill.int_Tensor")
# the scatters of one element per row that decompose into a select
SELECTS = ("aten.scatter.value", "aten.scatter.src")
READS = DECOMPOSED | SCATTERS
PUT = "aten.index_put.default"
MASKED_SCATTER = "aten.masked_scatter.default"
# eager's (a RuntimeError), where the mask selects more elements than the source has
MASKED_SCATTER_MESSAGE = "Number of elements of source < number of ones in mask"


def check_indices(graph: Graph) -> Graph:
    """Before `decompose`, which turns embedding and index_select into `x[idx]`
    (that counts a negative index from the end, where they raise) and nll_loss
    into `gather`: the indirect loads of decompositions are checked here, as the
    ops they come from check them."""
    nodes = graph.by_name()
    checked = {
        n.name
        for n in graph.nodes
        if n.target in DECOMPOSED
        or (gather_ok(n, nodes) and n.target != UNSAFE_INDEX)
        or _scatter_ok(n, nodes)
        or _masked_scatter_ok(n, nodes)
    }
    if not checked:
        return graph
    known = {  # positions, evaluated before the retrace records anything
        r.name: bounds(r, nodes)
        for name in checked
        for r in nodes[name].refs()
        if nodes[r.name].op == "call"
    }

    # (the indices' elements, low, size, ignored): one check each, with the
    # message of the first op that reads them, which eager raises in
    done: set[tuple] = set()

    def rewrite(node: Node, args, kwargs):
        if node.name not in checked:
            return NotImplemented
        x = args[0]
        if node.target in READS:
            x, dim, index = READS[node.target](args)
            low = -x.shape[dim] if node.target in WRAPS else 0
            reads = [(dim, index, READS[node.target](node.args)[2], low)]
        elif node.target == "aten.gather.default":
            reads = [(args[1], args[2], node.args[2], 0)]
        else:  # x[i0, i1, ...] (x is never 0-d) counts negative indices from the end
            reads = [
                (d, index, ref, -x.shape[d])
                for d, (index, ref) in enumerate(zip(args[1], node.args[1]))
                if index is not None
            ]
        if x.dim() == 0:
            return NotImplemented  # not an indirect load kernels compute
        for dim, index, ref, low in reads:
            size = x.shape[dim]
            within = known.get(ref.name)
            if within is not None and low <= within[0] and within[1] <= size:
                continue  # positions (0..T-1 of a table of more) known in range
            index = _distinct(index)
            in_range = (index >= low) & (index < size)
            ignored = None
            if node.target == "aten.nll_loss_forward.default":  # or ignored
                ignored = _argument(node, args, 4, -100)
                in_range = in_range | (index == ignored)
            key = (_elements_of(ref, nodes), low, size, ignored)
            if key in done:
                continue  # the same indices checked by an earlier op
            done.add(key)
            message = _message(node.target, dim % x.dim(), x.dim(), size)
            torch._assert_async(_every_in_parts(in_range), message)
        return SameOp(args, kwargs)

    def counted(node: Node, args, kwargs):  # Note [Masked scatters]
        if node.name not in checked:
            return NotImplemented
        x, mask, source = args
        mask = mask.expand(torch.broadcast_shapes(x.shape, mask.shape))
        distinct = _distinct(mask)  # each element once, times its copies
        selected = distinct.sum() * (mask.numel() // distinct.numel())
        torch._assert_async(selected <= source.numel(), MASKED_SCATTER_MESSAGE)
        return SameOp(args, kwargs)

    targets = (*GATHERS, *READS, PUT)
    rewrites = {target: rewrite for target in targets}
    return retrace(graph, rewrites={**rewrites, MASKED_SCATTER: counted})


def _scatter_ok(node: Node, nodes: dict[str, Node]) -> bool:
    """Whether `node` is a scatter that kernels compute (on either device: a
    check before a call into PyTorch is only redundant): a select (Note
    [Scatters of one element per row] in decompose.py), or a scatter that
    writes or adds (Note [Scatters] in schedule.py)."""
    if node.target == PUT:
        return any(scatter_ok(node, nodes, device) for device in ATOMIC_TYPES)
    if node.target not in SCATTERS or len(node.args) < 3:
        return False
    x, dim, index = SCATTERS[node.target](node.args)
    src = node.args[3] if len(node.args) > 3 else None
    metas = [nodes[r.name].meta if isinstance(r, Ref) else r for r in (x, index, src)]
    if not all(isinstance(m, TensorMeta) for m in metas[:2]):
        return False
    if node.target in SELECTS and one_per_row(metas[0].shape, dim, metas[1].shape):
        return True
    reduce = node.args[4] if node.target in REDUCTIONS else "sum"  # its 5th argument
    return put_in_kernel(node.target, *metas, reduce)


def _masked_scatter_ok(node: Node, nodes: dict[str, Node]) -> bool:
    """Whether `node` is a masked scatter kernels compute (Note [Masked
    scatters] in decompose.py)."""
    if node.target != MASKED_SCATTER or len(node.args) != 3:
        return False
    metas = [nodes[r.name].meta if isinstance(r, Ref) else None for r in node.args]
    if not all(isinstance(m, TensorMeta) for m in metas):
        return False
    x, mask, _ = metas
    return masked_scatter_rows(x, mask) is not None


# views that hold every element of their input, and no other
SAME_ELEMENTS = (
    LINKS
    - {
        "getitem",
        "aten.slice.Tensor",
        "aten.select.int",
        "aten.split_with_sizes.default",
        "aten.split.Tensor",
        "aten.unbind.int",
    }
) | {"aten.reshape.default", "aten.squeeze.default", "aten.alias.default"}


def _elements_of(ref: Ref, nodes: dict[str, Node]) -> str:
    """The value whose elements `ref`'s are: through views that keep them all
    (`dst[:, None].expand_as(messages)` holds `dst`'s), so that the scatters of a
    graph's sum, max and count at the same destinations check them once."""
    node = nodes[ref.name]
    while node.op == "call" and node.target in SAME_ELEMENTS:
        if not node.args or not isinstance(node.args[0], Ref):
            break
        ref = node.args[0]
        node = nodes[ref.name]
    return ref.name


def _distinct(index: torch.Tensor) -> torch.Tensor:
    """`index` without the dimensions it is expanded along (stride 0), which
    repeat the same indices: `dst[:, None].expand_as(messages)` is checked as
    its [E, 1] edges, not its [E, D] copies."""
    if not index.dim():
        return index
    at = tuple(
        slice(0, 1) if n > 1 and s == 0 else slice(None)
        for n, s in zip(index.shape, index.stride())
    )
    return index[at]


def _message(target: str, dim: int, rank: int, size: int) -> str:
    """Eager's message for an index out of range; `index_add` on the CPU raises
    an IndexError along a 1-D tensor or a middle dimension, else a RuntimeError."""
    if target == "aten.index_add.default" and rank > 1 and dim in (0, rank - 1):
        return f"index_add: index out of bounds for dimension {dim} with size {size}"
    return MESSAGES[target].format(dim=dim, size=size)


def _every_in_parts(ok: torch.Tensor) -> torch.Tensor:
    """`ok.all()`; for a large static `ok`, that of its parts' (Note [Indirect
    loads in range])."""
    n = ok.numel()
    if not isinstance(n, int):
        return every(ok)
    parts = 1
    while (
        parts < CHECK_PARTS_MAX
        and n % (parts * 2) == 0
        and n // (parts * 2) >= CHECK_PART
    ):
        parts *= 2
    if parts == 1:
        return every(ok)
    return every(every(ok.reshape(parts, n // parts), 1))


def _argument(node: Node, args, index: int, default):
    return (
        args[index]
        if len(args) > index
        else dict(node.kwargs).get("ignore_index", default)
    )


__all__ = ["check_indices"]
