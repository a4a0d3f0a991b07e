"""The joint graph and partition of a library model against eager autograd.

    python -m tests.models.joint_check MODEL

(in a process of its own: timm models need the torchvision stand-in on sys.path).
It traces the model of `factories.MODELS` as `transpile` does (built on the meta
device by its factory, inputs as declared), builds the joint graph with respect to
every parameter the forward reads, partitions it, and runs the forward, then the
backward on what it saved and random output gradients, with the reference
interpreter and the factory's real (seeded) weights. Eager autograd runs the same
model on the same inputs. It prints one JSON line: the outputs' and each
gradient's largest error, relative to the largest gradient of the model (a key
bias's true gradient is zero: its own scale is rounding noise), and whether the
trace is one graph or branches on tensor data (`regions`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main(name: str) -> dict:
    import torch

    from tests.models.check import inputs
    from tests.models.factories import MODELS, STUBS, has_real_torchvision
    from transpiler.frontend.loader import resolve
    from transpiler.frontend.source import SourceCache
    from transpiler.frontend.trace import instantiate, trace
    from transpiler.ir.graph import leaves
    from transpiler.ir.interpreter import run_graph
    from transpiler.options import Variant, parse_spec
    from transpiler.passes.joint import joint
    from transpiler.passes.partition import partition

    model = next(m for m in MODELS if m.name == name)
    if model.timm and not has_real_torchvision():
        sys.path.insert(0, str(STUBS))
    obj = resolve(model.target, ROOT).obj
    factory = resolve(model.factory, ROOT).obj
    specs = tuple((n, parse_spec(s)) for n, s in model.inputs.items())
    traced = trace(
        obj,
        instantiate(obj, {}, factory, ROOT),
        Variant(specs, "cpu"),
        SourceCache(ROOT),
    )
    if traced.graph is None:
        return {"regions": traced.fallback is None}
    torch.manual_seed(0)
    real = factory().eval()
    feed = inputs(model, 1234)
    read = {n.target for n in traced.graph.nodes if n.op == "param"}
    wanted = [p for p, _ in real.named_parameters() if p in read]
    split = partition(joint(traced.graph, wanted))

    want = real(**feed)
    outs = [t for t in leaves(want) if isinstance(t, torch.Tensor) and t.requires_grad]
    torch.manual_seed(1)
    tangents = [torch.randn_like(t) for t in outs]
    params = [real.get_parameter(p) for p in wanted]
    want_grads = torch.autograd.grad(outs, params, tangents, allow_unused=True)
    with torch.no_grad():
        got, saved = run_graph(split.forward, dict(feed), real)
        backward_feed = dict(feed) | dict(zip(split.saved, saved))
        got_grads = run_graph(
            split.backward, backward_feed | dict(zip(split.tangents, tangents)), real
        )
    scale = max(float(w.abs().max()) for w in want_grads if w is not None)
    errors = {}
    for p, g, w in zip(wanted, got_grads, want_grads):
        if (g is None) != (w is None):
            errors[p] = "missing" if g is None else "not in eager"
        elif w is not None:
            errors[p] = float((g - w).abs().max()) / scale
    output_error = max(
        float((g - w.detach()).abs().max() / (w.detach().abs().max() + 1e-12))
        for g, w in zip(leaves(got), leaves(want))
        if isinstance(w, torch.Tensor) and w.is_floating_point()
    )
    return {
        "regions": False,
        "tangents": [len(split.tangents), len(outs)],
        "gradients": len(wanted),
        "errors": errors,
        "output_error": output_error,
        "saved_bytes": split.saved_bytes(),
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
