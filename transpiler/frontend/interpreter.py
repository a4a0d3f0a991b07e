"""An abstract interpreter over the libcst tree of the user's forward.

Python values (shapes, config, ints, modules) are computed concretely; tensors are meta
tensors whose ops the `Recorder` turns into graph nodes. User-defined functions and
modules are inlined by interpreting their source; layers from `torch.nn` and every other
library call run directly under the recorder. Conditions and loops over static values
are decided here, so only the taken path is recorded; each module attribute read on the
way becomes a guard of the variant. Anything else raises `Unsupported`.
"""

from __future__ import annotations

import abc
import builtins
import contextlib
import contextvars
import dataclasses
import importlib
import importlib.util
import inspect
import operator
import sys
import traceback
import types
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import libcst as cst
import torch
import torch.nn.functional as F
from torch import nn

from transpiler.frontend.fallback import (
    CONTAINERS,
    MUTATORS,
    Names,
    ObjectPaths,
    StateWrites,
    Stub,
    is_record,
    plan_stub,
)
from transpiler.frontend.guards import AttrRead, GlobalRead, ModuleRead, guardable
from transpiler.frontend.recorder import (
    Checkpoint,
    OpaqueValue,
    Recorder,
    Unsupported,
    check_dtypes,
    covers,
    memory_of,
    with_cause,
)
from transpiler.frontend.source import OPAQUE_PACKAGES, SourceCache, SourceFile
from transpiler.ir.graph import (
    InputObject,
    Node,
    Opaque,
    Ref,
    Span,
    TensorMeta,
    subgraph,
)
from transpiler.ir.ops import (
    CHECKS_DATA,
    attention_arguments,
    device_strides,
    fused_attention,
)
from transpiler.ir.region import LoopBody

BINARY_OPS = {
    "Add": operator.add,
    "Subtract": operator.sub,
    "Multiply": operator.mul,
    "Divide": operator.truediv,
    "FloorDivide": operator.floordiv,
    "Modulo": operator.mod,
    "Power": operator.pow,
    "MatrixMultiply": operator.matmul,
    "LeftShift": operator.lshift,
    "RightShift": operator.rshift,
    "BitOr": operator.or_,
    "BitAnd": operator.and_,
    "BitXor": operator.xor,
}
AUG_OPS = {
    "AddAssign": operator.iadd,
    "SubtractAssign": operator.isub,
    "MultiplyAssign": operator.imul,
    "DivideAssign": operator.itruediv,
    "FloorDivideAssign": operator.ifloordiv,
    "ModuloAssign": operator.imod,
    "PowerAssign": operator.ipow,
    "MatrixMultiplyAssign": operator.imatmul,
    "BitOrAssign": operator.ior,
    "BitAndAssign": operator.iand,
    "BitXorAssign": operator.ixor,
}
# Note [Masked updates]
# ~~~~~~~~~~~~~~~~~~~~~
# `x[mask] += v` reads `x[mask]`, whose shape is how many elements the mask
# selects (data: a graph break), adds, and writes the sum back there. Where the
# mask is a bool tensor over x's leading dimensions and v the same for every
# selected element (a number, or a tensor over the dimensions after the mask's),
# that is `x` written with `where(mask, x + v, x)`: the op on every element, each
# kept only where the mask holds, the same values eager computes there. Not for
# `//=` and `%=` (an integer division by zero raises, where eager's only would at
# a selected element), nor where `x + v` would take another dtype than x's (eager
# raises: its in-place op cannot cast back).
MASKED_UPDATES = {
    "AddAssign": operator.add,
    "SubtractAssign": operator.sub,
    "MultiplyAssign": operator.mul,
    "DivideAssign": operator.truediv,
    "PowerAssign": operator.pow,
    "BitOrAssign": operator.or_,
    "BitAndAssign": operator.and_,
    "BitXorAssign": operator.xor,
}
UNARY_OPS = {
    "Minus": operator.neg,
    "Plus": operator.pos,
    "BitInvert": operator.invert,
    "Not": operator.not_,
}
COMPARE_OPS = {
    "Equal": operator.eq,
    "NotEqual": operator.ne,
    "LessThan": operator.lt,
    "LessThanEqual": operator.le,
    "GreaterThan": operator.gt,
    "GreaterThanEqual": operator.ge,
    "Is": operator.is_,
    "IsNot": operator.is_not,
    "In": lambda a, b: a in b,
    "NotIn": lambda a, b: a not in b,
}
# Calls kept whole as one extern op instead of being decomposed on the meta device.
EXTERN_FUNCTIONS = {
    F.scaled_dot_product_attention: "aten.scaled_dot_product_attention.default",
}


def own_signature(fn: types.FunctionType) -> inspect.Signature:
    """The parameters `fn`'s code binds. A decorator may set `__signature__` to
    those of the function it wraps (transformers' `deprecate_kwarg` does), while
    its own body reads its `*args, **kwargs`."""
    if "__signature__" not in vars(fn):
        return inspect.signature(fn, follow_wrapped=False)
    bare = types.FunctionType(
        fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__
    )
    bare.__kwdefaults__ = fn.__kwdefaults__
    return inspect.signature(bare, follow_wrapped=False)


def attention_written_out(args, kwargs, device: str) -> bool:
    """Whether a training variant traces a call of `F.scaled_dot_product_attention`
    through its ops (`trace.DropoutAsOp`) instead of keeping it whole: where it
    applies dropout that the device's fused kernel does not draw."""
    given = attention_arguments(args, kwargs)
    p = given.get("dropout_p", 0.0)
    dropout = not isinstance(p, (int, float)) or p > 0
    return dropout and not fused_attention(given, device)


NO_EFFECT_CONTEXTS = (
    torch.no_grad,
    torch.inference_mode,
    torch.enable_grad,
    contextlib.nullcontext,
)
PYTHON_SIDE_EFFECTS = {
    builtins.print,
    builtins.input,
    builtins.open,
    builtins.exec,
    builtins.eval,
    builtins.breakpoint,
}
# Code from these modules runs directly at transpile time (on meta tensors and Python
# values): it has no effect outside the values it returns. Anything else (NumPy,
# logging, I/O, C extensions) becomes fallback code that runs when the model does.
PURE_MODULES = (
    "torch",
    "math",
    "operator",
    "builtins",
    "functools",
    "itertools",
    "collections",
    "typing",
    "numbers",
    "einops",
)
# Queries from the rest of the standard library that only read the objects given.
PURE_FUNCTIONS = {
    inspect.signature,
    inspect.isclass,
    inspect.isfunction,
    inspect.ismethod,
    inspect.isroutine,
    inspect.unwrap,
    dataclasses.fields,
    dataclasses.is_dataclass,
    contextlib.nullcontext,  # a context that does nothing (NO_EFFECT_CONTEXTS)
}
# Functions of torch (and the modules above) that act on the world or on global state
# rather than computing a value: RNG state, files, settings, devices, processes,
# autograd. They must run when the model does, in order, so they are graph breaks.
EFFECT_MODULES = (
    "torch.random",
    "torch.serialization",
    "torch.cuda",
    "torch.mps",
    "torch.xpu",
    "torch.distributed",
    "torch.multiprocessing",
    "torch.profiler",
    "torch.autograd",
    "torch.hub",
    "torch.utils.tensorboard",
    "torch._tensor_str",
    "torch.backends",
)
EFFECT_NAMES = {
    "manual_seed",
    "seed",
    "initial_seed",
    "get_rng_state",
    "set_rng_state",
    "get_state",
    "set_state",
    "save",
    "load",
    "from_file",
    "use_deterministic_algorithms",
    "backward",
    "register_hook",
    "register_post_accumulate_grad_hook",
    "retain_grad",
    "record_stream",
    "share_memory_",
    "pin_memory",
}
# Queries of how the code is being run whose answer for generated code is known:
# it is not traced by torch.compile, TorchScript or FX, and its fallback code is not
# run inside a CUDA graph capture (a variant captures its own kernels only).
RUN_STATE = {
    torch.compiler.is_compiling: False,
    torch.compiler.is_dynamo_compiling: False,
    torch.jit.is_tracing: False,
    torch.jit.is_scripting: False,
    torch.cuda.is_current_stream_capturing: False,
    **({torch.xpu.is_current_stream_capturing: False} if hasattr(torch, "xpu") else {}),
}
# Builtins that, called without arguments, read the calling frame: here that would be
# the interpreter's, so they run in fallback code, in the user's.
FRAME_READERS = {builtins.locals, builtins.globals, builtins.vars, builtins.dir}
USES_OPAQUE = "uses a value computed by fallback code"
FORMATS_OPAQUE = "formats a value computed by fallback code as text"
MAX_BRANCHES = 8  # data-dependent conditions along one path through the code
MAX_UNROLL = 1024  # iterations of a `while` on Python values


class UserCodeError(Exception):
    """The user's code raised under the declared inputs: eager would raise it on
    every call, so it is the user's error to report, not fallback code to write."""

    def __init__(self, error: BaseException, span: Span | None):
        super().__init__(f"{type(error).__name__}: {_first_line(error)}")
        self.error = error
        self.span = span


class _Return(Exception):
    def __init__(self, value):
        self.value = value


class Retrace(Exception):
    """Trace again from the start: a statement became fallback code on every path
    (see `Interpreter._give_up`)."""


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class Frame:
    def __init__(
        self,
        src: SourceFile,
        local: dict,
        globals_: dict,
        self_name: str = "",
        enclosing: tuple[dict, ...] = (),
    ):
        self.src = src
        self.locals = local
        self.globals = globals_
        self.self_name = self_name  # a method's first parameter, for `super()`
        # the locals of the functions around a nested one, innermost first: live,
        # so a closure sees what its enclosing function binds later, as in Python
        self.enclosing = enclosing
        self.nonlocals: set[str] = set()

    def visible(self) -> dict:
        """Every name the frame can read without a global: its own and those of
        the functions around it."""
        out: dict = {}
        for scope in reversed(self.enclosing):
            out.update(scope)
        out.update(self.locals)
        return out


class Closure:
    """A function defined while the forward runs (a nested `def`, a `lambda`):
    the interpreter runs its source with its defining frame around it. Library
    code may call it too (`sorted(key=...)`, `functools.reduce`): it is then run
    through the same interpreter.

    What it runs is kept in slots, outside `__dict__`, which decorators copy
    from function to wrapper (`functools.wraps`); `__dict__` holds what a
    function's does (`__name__`, `__wrapped__`, ...)."""

    __slots__ = (
        "__dict__",
        "_enclosing",
        "_globals",
        "_interpreter",
        "_node",
        "_params",
        "_src",
    )

    def __init__(
        self,
        interpreter: Interpreter,
        node: cst.FunctionDef | cst.Lambda,
        frame: Frame,
        signature: inspect.Signature,
        name: str,
    ):
        self._interpreter = interpreter
        self._node = node
        self._src = frame.src
        self._globals = frame.globals
        self._enclosing = (frame.locals, *frame.enclosing)
        self._params = signature
        self.__signature__ = signature
        self.__name__ = self.__qualname__ = name
        self.__module__ = frame.globals.get("__name__")
        self.__doc__ = None

    def __call__(self, *args, **kwargs):
        return self._interpreter.run_closure(self, args, kwargs)

    def __repr__(self) -> str:
        return f"<function {self.__qualname__}>"


@dataclass(frozen=True)
class _Mark:
    """Where the interpreter stood before a statement (see `_rollback`)."""

    nodes: Checkpoint
    guards: int
    comparisons: int
    branches: int
    last_stub: Ref | None
    locals: dict
    contexts: int
    attr_writes: int


@dataclass(frozen=True)
class BranchPoint:
    """A condition on tensor data: where the path through the code forks."""

    position: int  # number of graph nodes recorded before it
    cond: Ref
    span: Span | None
    taken: bool


class _Token:
    def __init__(self, var, previous):
        self.var = var
        self.previous = previous


class ContextVars:
    """Context variables (`contextvars.ContextVar`) as the traced call sees them.

    A call that sets one and resets it before it returns (transformers' output
    capture around a forward) changes nothing its caller can see: the pair runs
    here, on values kept beside the real variables, and generated code has
    neither. One still set when the call returns is an effect of the call, and
    fallback code run while one is set would not see it: both are unsupported."""

    def __init__(self):
        self.values: dict = {}  # variable -> value set here
        self.journal: list[tuple] = []  # (variable, value before), to roll back
        self.setter: dict = {}  # variable -> the statement that last set it

    def call(self, var, method: str, args: tuple, stmt) -> Any:
        if method == "get":
            if var in self.values:
                return self.values[var]
            return var.get(*args)
        if method == "set":
            (value,) = args
            token = _Token(var, self.values.get(var, _MISSING))
            self._put(var, value)
            self.setter[var] = stmt
            return token
        (token,) = args  # reset
        if not isinstance(token, _Token) or token.var is not var:
            raise Unsupported("resets a context variable with a token of another")
        self._put(var, token.previous)
        return None

    def _put(self, var, value) -> None:
        self.journal.append((var, self.values.get(var, _MISSING)))
        if value is _MISSING:
            self.values.pop(var, None)
        else:
            self.values[var] = value

    def rollback(self, length: int) -> None:
        while len(self.journal) > length:
            var, value = self.journal.pop()
            if value is _MISSING:
                self.values.pop(var, None)
            else:
                self.values[var] = value

    def check_none_set(self, what: str) -> None:
        if self.values:
            name = next(iter(self.values)).name
            raise Unsupported(f"{what} while context variable {name!r} is set")

    def left_set(self) -> tuple[Any, str] | None:
        """The statement that set a variable still set, and why it is an effect."""
        if not self.values:
            return None
        var = next(iter(self.values))
        return self.setter[var], f"sets context variable {var.name!r} for later"


class Interpreter:
    """Runs a forward's source over meta tensors; see the module docstring.

    `decisions` fixes the outcome of the first data-dependent conditions met (the
    rest are taken as true); `branches` records every one met, so `trace` can
    enumerate the paths. `stubs` numbers fallback code across those paths.
    """

    def __init__(
        self,
        recorder: Recorder,
        sources: SourceCache,
        module_paths: ObjectPaths,
        decisions: tuple[bool, ...] = (),
        stubs: dict[Stub, int] | None = None,
        loops: dict[str, tuple[int, LoopBody]] | None = None,
        whole: dict[int, str] | None = None,
        train: bool = False,
        device: str = "cpu",
    ):
        self.recorder = recorder
        self.sources = sources
        self.module_paths = module_paths
        # what the variant depends on, in the order read (frontend/guards.py):
        # AttrRead / GlobalRead -> the value, ModuleRead -> interpreted or not
        self.guards: dict[tuple, Any] = {}
        self.depth = 0
        self.decisions = decisions
        self.branches: list[BranchPoint] = []
        self.stubs = stubs if stubs is not None else {}
        self.loops = loops if loops is not None else {}
        # statements (by id) that are fallback code on every path, with the reason
        self.whole = whole if whole is not None else {}
        self.last_stub: Ref | None = None
        # a training variant's attention with dropout that the device's fused
        # kernel does not draw is traced through its ops (`trace.DropoutAsOp`)
        self.train = train
        self.device = device
        # integer comparisons decided here, as (span, operator, left, right, outcome):
        # with a dynamic dimension, one whose operands change with it is a guard
        self.comparisons: list[tuple] = []
        # Python state outside the frame: containers reached through attributes and
        # globals (`shared`, by id), and attributes that fallback code may change
        # (`changed`: id(object) -> names, None for any), read at run time after
        self.shared: set[int] = set()
        self.changed: dict[int, set[str | None]] = {}
        self._held: list = []  # keeps the ids above valid
        self.in_tensor_loop = 0  # depth of `while` bodies on tensor data
        self.contexts = ContextVars()
        # objects of interpreted classes made by this call (by id), whose
        # attributes it sets here, and the journal of those writes (to roll back)
        self.created: dict[int, object] = {}
        # objects passed in (by id), whose attribute writes generated code replays
        # (Note [Objects passed in] in objects.py)
        self.inputs: dict[int, InputObject] = {}
        self.attr_writes: list[tuple[object, str, Any]] = []
        self.set_counts: Counter[tuple[int, str]] = Counter()  # in attr_writes
        self.statements: list = [None]  # being run, innermost last

    # ---- functions ------------------------------------------------------------

    def run_function(self, fn, args: tuple, kwargs: dict) -> Any:
        """Interpret a Python function with the given arguments: of a decorated
        one, the outermost layer that is interpreted (a library's wrapper decides
        what the function it wraps gets), with that layer's globals and closure."""
        fn = self._layer(fn)
        src, node = self.sources.function(fn, unwrap=False)
        try:
            bound = own_signature(fn).bind(*args, **kwargs)
        except TypeError as e:  # Python raises it before the call
            raise _users(TypeError(f"{fn.__qualname__}(): {e}")) from None
        bound.apply_defaults()
        first = next(iter(bound.arguments), "")
        frame = Frame(src, dict(bound.arguments), fn.__globals__, first)
        if fn.__closure__:
            for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
                frame.locals.setdefault(name, cell.cell_contents)
        return self._run(node.body, frame)

    def run_closure(self, fn: Closure, args: tuple, kwargs: dict) -> Any:
        try:
            bound = fn._params.bind(*args, **kwargs)
        except TypeError as e:
            raise _users(TypeError(f"{fn.__qualname__}(): {e}")) from None
        bound.apply_defaults()
        first = next(iter(bound.arguments), "")
        local = dict(bound.arguments)
        frame = Frame(fn._src, local, fn._globals, first, fn._enclosing)
        return self._run(fn._node.body, frame)

    def _run(self, body, frame: Frame) -> Any:
        """Run a function's body (a lambda's expression) in `frame`."""
        self.depth += 1
        if self.depth > 64:
            raise Unsupported("recursion too deep to inline", self._span())
        saved = self.recorder.span
        try:
            if isinstance(body, cst.BaseExpression):
                return self.eval(body, frame)
            self.exec_block(body, frame)
            return None
        except _Return as r:
            return r.value
        finally:
            self.depth -= 1
            if saved is not None:  # the outermost call keeps its last line's span
                self.recorder.span = saved

    def call(self, fn, args: tuple, kwargs: dict) -> Any:
        if isinstance(fn, nn.Sequential) and not self._is_user(type(fn).forward):
            (x,) = args
            for layer in fn:
                x = self.call(layer, (x,), {})
            return x
        if isinstance(fn, nn.Module):
            forward = type(fn).forward
            interpreted = self._is_user(forward)
            path = self.module_paths.get(id(fn))
            if path is not None:  # its class, hooks and (for a layer) state
                self.guards[ModuleRead(path, called=True)] = interpreted
            if interpreted:
                return self.run_function(forward, (fn, *args), kwargs)
            if _has_opaque((args, kwargs)):
                span = self._span()
                raise Unsupported("uses a value computed by fallback code", span)
            return fn(*args, **kwargs)
        if isinstance(fn, Closure):
            return self.run_closure(fn, args, kwargs)
        if isinstance(getattr(fn, "__self__", None), FunctionContext):
            return fn(*args, **kwargs)  # what ctx records, for a backward not run
        forward = _custom_forward(fn)
        if forward is not None and not self.train and self._is_user(forward):
            return self._custom_function(fn.__self__, forward, args, kwargs)
        if _autocast_off(fn, args, kwargs):  # variants compute without autocast
            return contextlib.nullcontext()
        if _marked_constant(fn) and not _contains((args, kwargs), torch.Tensor):
            return _apply(lambda: fn(*args, **kwargs))  # Note [Constant results]
        owner = getattr(fn, "__self__", None)
        if isinstance(owner, contextvars.ContextVar) and not kwargs:
            return self.contexts.call(owner, fn.__name__, args, self.statements[-1])
        if is_record(fn) and fn.__module__.split(".")[0] not in OPAQUE_PACKAGES:
            return self._record(fn, args, kwargs)
        if self._constructs(fn):
            obj = object.__new__(fn)
            self.created[id(obj)] = obj
            self.run_function(fn.__init__, (obj, *args), kwargs)
            return obj
        if isinstance(fn, types.MethodType) and self._is_user(fn.__func__):
            return self.run_function(fn.__func__, (fn.__self__, *args), kwargs)
        if isinstance(fn, types.FunctionType) and self._is_user(fn):
            return self.run_function(fn, args, kwargs)
        if _has_opaque((args, kwargs)):
            raise Unsupported("uses a value computed by fallback code", self._span())
        if fn in RUN_STATE and not args and not kwargs:
            return RUN_STATE[fn]
        moved = self._on_own_device(fn, args, kwargs)
        if moved is None:
            return fn.__self__
        fn, args, kwargs = moved
        args, kwargs = self._own_device(fn, args, kwargs)
        if fn in (torch.tensor, torch.as_tensor) and args and _python_data(args[0]):
            return tensor_of_data(*args, **kwargs)
        base = getattr(fn, "__self__", None)
        if (
            isinstance(base, torch.Tensor)
            and getattr(fn, "__name__", "") == "new_tensor"
            and args
            and _python_data(args[0])
        ):  # `x.new_tensor(data)`: x's dtype and device unless given
            like = {"dtype": base.dtype, "device": base.device}
            return tensor_of_data(*args, **{**like, **kwargs})
        if fn in EXTERN_FUNCTIONS and not (
            self.train and attention_written_out(args, kwargs, self.device)
        ):
            return self._extern(EXTERN_FUNCTIONS[fn], fn, args, kwargs)
        if fn in PYTHON_SIDE_EFFECTS:
            raise Unsupported(
                f"calls {fn.__name__}(), a Python side effect", self._span()
            )
        if fn in FRAME_READERS and not args:  # would see the interpreter's frame
            raise Unsupported(f"calls {fn.__name__}(), which reads the frame")
        if fn in (builtins.min, builtins.max) and all(_is_int(a) for a in args):
            result = fn(*args)
            for a in args:  # which argument won is a comparison too
                self.comparisons.append((self._span(), "Equal", result, a, result == a))
            return result
        if self._mutates_shared(fn, args):
            name = getattr(fn, "__name__", type(fn).__name__)
            raise Unsupported(
                f"calls {name}(), which changes state outside forward", self._span()
            )
        owner = _owner(fn)
        if _has_effect(fn, owner):
            name = getattr(fn, "__name__", type(fn).__name__)
            raise Unsupported(
                f"calls {owner}.{name}, which acts at run time", self._span()
            )
        if not owner.startswith(PURE_MODULES) and fn not in PURE_FUNCTIONS:
            name = getattr(fn, "__qualname__", type(fn).__name__)
            raise Unsupported(f"calls {owner}.{name}, outside PyTorch", self._span())
        try:
            return fn(*args, **kwargs)
        except Unsupported:
            raise
        except Exception as e:
            if needs_data(e):
                raise Unsupported(f"needs tensor data: {_first_line(e)}") from e
            _users(e)
            raise

    def _custom_function(self, function, forward, args: tuple, kwargs: dict) -> Any:
        """`Function.apply(*args)` of a custom autograd Function, without
        gradients: its forward (Note [Custom autograd functions])."""
        if function.setup_context is not _SETUP_CONTEXT:  # forward(*args) alone
            return self.run_function(forward, args, kwargs)
        ctx = FunctionContext(len(args))
        self.created[id(ctx)] = ctx
        return self.run_function(forward, (ctx, *args), kwargs)

    def _constructs(self, cls) -> bool:
        """Whether calling `cls` is interpreted: a plain class (not a module, not
        a record) whose `__init__` is Python source and that Python makes with
        `object.__new__`. The object is Python state of the call (`created`)."""
        return (
            isinstance(cls, type)
            and type(cls) in (type, abc.ABCMeta)
            and not issubclass(cls, (nn.Module, BaseException, torch.Tensor))
            and cls.__new__ is object.__new__
            and cls.__setattr__ is object.__setattr__
            and "__slots__" not in vars(cls)
            and self._is_user(cls.__init__)
        )

    def _set_model_state(self, module: nn.Module, name: str, value) -> None:
        """`self.shift_size = 0` on a module of the model: set here, and by the
        variant when it starts (Note [Model state the call sets])."""
        if self.train:
            raise Unsupported(f"sets .{name} of a module in a training step")
        if self.conditional:
            raise Unsupported(
                f"sets .{name} of a module after a condition on tensor data"
            )
        if self.last_stub is not None:
            raise Unsupported(f"sets .{name} of a module after fallback code")
        read = self.guards.get(AttrRead(self.module_paths[id(module)], name), value)
        if not _same_value(read, value):
            raise Unsupported(
                f"sets .{name} of a module to {value!r}, where it read {read!r}: "
                "the next call would find another value"
            )
        self._set_attribute(module, name, value)

    def first_set(self, keep: Callable[[object], bool]) -> list[tuple[object, str]]:
        """The attributes the call set on objects that `keep` accepts, as
        (object, name), in the order first set."""
        written: dict[tuple[int, str], tuple[object, str]] = {}
        for obj, name, _ in self.attr_writes:
            if keep(obj):
                written.setdefault((id(obj), name), (obj, name))
        return list(written.values())

    def model_state(self) -> list[tuple[str, str, Any]]:
        """The plain attributes the call set on modules of the model: (module
        path, attribute, value at the return), in the order first set."""
        return [
            (self.module_paths[id(obj)], name, vars(obj)[name])
            for obj, name in self.first_set(lambda obj: isinstance(obj, nn.Module))
        ]

    def restore_model(self) -> None:
        """Put back what the call set on modules: the next path, or variant, is
        traced from the model as it was given."""
        for obj, name, old in reversed(self.attr_writes):
            if isinstance(obj, nn.Module):
                _restore(obj, name, old)

    def set_here(self, obj, name: str) -> bool:
        """Whether this call set `obj.name` (its value is the call's own)."""
        return self.set_counts[id(obj), name] > 0

    def _set_attribute(self, obj, name: str, value) -> None:
        """`obj.name = value` for an object this call made: done here, journaled."""
        self.attr_writes.append((obj, name, vars(obj).get(name, _MISSING)))
        self.set_counts[id(obj), name] += 1
        object.__setattr__(obj, name, value)

    def _record(self, cls: type, args: tuple, kwargs: dict) -> Any:
        """A dataclass or named tuple (transformers' `ModelOutput`s): built here,
        as every call builds it; its fields hold what the call computed."""
        if _has_opaque((args, kwargs)):
            raise Unsupported("uses a value computed by fallback code", self._span())
        try:
            return cls(*args, **kwargs)
        except Exception as e:
            if needs_data(e):
                raise Unsupported(f"needs tensor data: {_first_line(e)}") from e
            raise _users(e) from None

    def _mark_changed(self, stmt, frame: Frame) -> None:
        """After fallback code: what it may assign (see StateWrites) is read at run
        time from now on."""
        writes = StateWrites()
        stmt.visit(writes)
        for expr, attr in writes.found:
            obj = _lookup(expr, frame)
            if obj is not _MISSING:
                self.changed.setdefault(id(obj), set()).add(attr)
                self._held.append(obj)

    def _mutates_shared(self, fn, args: tuple) -> bool:
        """`self.seen.append(x)`, `setattr(self, "n", 1)`: run at transpile time, the
        change would happen once, to the traced objects, never when the model runs."""
        if fn in (builtins.setattr, builtins.delattr, object.__setattr__):
            return True
        owner = getattr(fn, "__self__", None)
        return (
            getattr(fn, "__name__", "") in MUTATORS
            and isinstance(owner, CONTAINERS)
            and id(owner) in self.shared
        )

    def _own_device(self, fn, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """`args` and `kwargs` of a call given the variant's own device
        (`torch.zeros(n, device="cuda")` in a CUDA variant, `torch.empty_like(x,
        device=x.device)`, `torch.Generator(x.device)`), with that device the one
        tracing stands for it, meta: the tensor is traced, and the variant makes
        it on its inputs' device. A conversion that may return its input
        (`torch.as_tensor(t, device="cpu")`) of a real tensor is left as it is:
        eager copies it there, or returns it (Note [The variant's device])."""
        meta = torch.device("meta")
        if getattr(fn, "__name__", None) in RETURNS_ITS_INPUT:
            subject = getattr(fn, "__self__", None)
            if not isinstance(subject, torch.Tensor):  # torch.as_tensor(x, ...)
                subject = args[0] if args else None
            if isinstance(subject, torch.Tensor) and not _traced(subject):
                return args, kwargs  # a real tensor: eager's copy, or itself
        args = tuple(
            meta if isinstance(a, torch.device) and self._own(a) else a for a in args
        )
        device = kwargs.get("device")
        if device is None or not self._own(device):
            return args, kwargs  # another device, or one GPU of several by number
        return args, {**kwargs, "device": meta}

    def _own(self, device) -> bool:
        """Whether `device` (a torch.device or its name) is the variant's own,
        without a GPU's number, or meta, which tracing stands for it with (a
        device read where the interpreter does not see it)."""
        device = _device(device)
        if device is None:
            return False
        return device.type == "meta" or (device.type, device.index) == (
            self.device,
            None,
        )

    def _on_own_device(self, fn, args: tuple, kwargs: dict):
        """A traced tensor's move to the variant's own device (`mask.to(x.device)`,
        `x.to("cuda", torch.float16)`, `x.cpu()` in a CPU variant), which eager
        makes without moving: (fn, args, kwargs) to call instead, or None where it
        is the tensor itself (Note [The variant's device]). A move elsewhere is
        a graph break: eager makes a tensor of another device."""
        subject = getattr(fn, "__self__", None)
        name = getattr(fn, "__name__", None)
        if not _traced(subject) or name not in ("to", "cpu", "cuda"):
            return fn, args, kwargs
        if name != "to":  # x.cpu(), x.cuda(): their device by name
            if name != self.device or args:
                raise Unsupported(f"moves a tensor off the variant's device: .{name}()")
            return None if set(kwargs) <= {"non_blocking"} else (fn, args, kwargs)
        for device in (*args, kwargs.get("device")):
            if _device(device) is not None and not self._own(device):
                raise Unsupported(
                    f"moves a tensor off the variant's device: .to({device!r})"
                )
        rest = tuple(a for a in args if not self._own(a))
        if rest == args:
            return fn, args, kwargs
        kwargs = {k: v for k, v in kwargs.items() if k != "non_blocking"}
        return (fn, rest, kwargs) if rest or kwargs else None

    def _is_user(self, fn) -> bool:
        """Whether `fn`, or a function it wraps, is interpreted (Note [What is
        interpreted] in source.py)."""
        return self._interprets(self._layer(fn))

    def _layer(self, fn):
        """The layer of a decorator chain (`__wrapped__`) that runs here: the
        outermost one interpreted, else the innermost function."""
        while not self._interprets(fn) and hasattr(fn, "__wrapped__"):
            fn = fn.__wrapped__
        return fn

    def _interprets(self, fn) -> bool:
        if not isinstance(fn, types.FunctionType):
            return False
        try:
            return self.sources.is_user_file(inspect.getsourcefile(fn))
        except TypeError:
            return False

    def _extern(self, target: str, fn, args, kwargs):
        check_dtypes(target, args, kwargs)
        with torch.utils._python_dispatch._disable_current_modes():
            out = fn(*args, **kwargs)
            stride = device_strides(target, out, args)
            out = torch.empty_strided(out.shape, stride, dtype=out.dtype, device="meta")
        self.recorder.record(target, args, kwargs, out)
        return out

    # ---- statements -----------------------------------------------------------

    def exec_block(self, body, frame: Frame) -> None:
        stmts = body.body if isinstance(body, cst.BaseSuite) else body
        for stmt in stmts:
            self.exec_stmt(stmt, frame)

    def exec_stmt(self, stmt: cst.CSTNode, frame: Frame) -> None:
        line = frame.src.line_of(stmt)
        span = Span(frame.src.display, line, frame.src.text_of(line))
        self.recorder.span = span
        builder = self.recorder.builder
        mark = _Mark(
            builder.checkpoint(),
            len(self.guards),
            len(self.comparisons),
            len(self.branches),
            self.last_stub,
            dict(frame.locals),
            len(self.contexts.journal),
            len(self.attr_writes),
        )
        if id(stmt) in self.whole:
            self.fallback(stmt, frame, span, self.whole[id(stmt)])
            return
        self.statements.append(stmt)
        try:
            self._exec_stmt(stmt, frame)
        except (_Return, _Break, _Continue, UserCodeError, Retrace):
            raise
        except Unsupported as e:
            self._give_up(stmt, frame, span, mark, e.reason, e.cause)
        except Exception as e:
            if OpaqueValue.__name__ in str(e):  # Python refused a fallback value
                reason = USES_OPAQUE
            elif not needs_data(e) and not _ours(e) and not self.conditional:
                raise UserCodeError(e, span) from e
            else:  # it fails on meta values (or only on this path): run it eagerly
                reason = f"{type(e).__name__}: {_first_line(e)}"
            self._give_up(stmt, frame, span, mark, reason)
        finally:
            self.statements.pop()

    def returned(self) -> None:
        """The traced call has returned: a context variable it set and left set
        is state for later code, so the statement that set it is fallback code
        from the outset (`whole`)."""
        left = self.contexts.left_set()
        if left is not None:
            stmt, why = left
            self.whole[id(stmt)] = why
            raise Retrace()

    def _give_up(
        self,
        stmt,
        frame: Frame,
        span: Span,
        mark: _Mark,
        why: str,
        cause: tuple[Span, str] | None = None,
    ) -> None:
        """`stmt` becomes fallback code. Where it met conditions on tensor data, the
        paths through them are gone with it; the paths `trace` enumerates must stay
        the same on every run, so tracing starts again with `stmt` as fallback code
        from the outset (`whole`)."""
        if len(self.branches) > mark.branches:
            self.whole[id(stmt)] = with_cause(why, span, cause)
            raise Retrace()
        self._rollback(mark, frame)
        self.fallback(stmt, frame, span, why, cause)

    @property
    def conditional(self) -> bool:
        """Whether the statement being run may not run at all for these inputs: it
        follows a condition on tensor data, or is in a `while` on tensor data."""
        return bool(self.branches) or self.in_tensor_loop > 0

    def _rollback(self, mark: _Mark, frame: Frame) -> None:
        """Forget what a statement that becomes fallback code did here: the nodes it
        recorded, the guards and comparisons of values it read and the conditions
        on data it met (it reads and decides them itself), the names it bound."""
        self.recorder.builder.rollback(mark.nodes)
        for guard in list(self.guards)[mark.guards :]:
            del self.guards[guard]
        del self.comparisons[mark.comparisons :]
        del self.branches[mark.branches :]
        self.last_stub = mark.last_stub
        self.contexts.rollback(mark.contexts)
        while len(self.attr_writes) > mark.attr_writes:
            obj, name, old = self.attr_writes.pop()
            self.set_counts[id(obj), name] -= 1
            _restore(obj, name, old)
        frame.locals.clear()
        frame.locals.update(mark.locals)

    def fallback(
        self,
        stmt,
        frame: Frame,
        span: Span,
        reason: str,
        cause: tuple[Span, str] | None = None,
    ) -> None:
        """Record `stmt` as fallback code (a graph break) and bind what it assigns;
        `cause`: the graph break inside it that made it one, where another
        statement's (Note [Graph breaks that spread] in recorder.py).

        Fallback code runs in source order (`_after`: the previous fallback call).
        When it may write tensors in place, everything compiled that read their old
        values runs before it (`_reads`), and later reads see what it returns.
        """
        self.recorder.span = span
        builder = self.recorder.builder
        try:
            self.contexts.check_none_set("runs fallback code")
            plan = plan_stub(
                stmt,
                frame.visible(),
                frame.globals,
                span,
                with_cause(reason, span, cause),
                builder,
                self.module_paths,
                frame.self_name,
            )
        except Unsupported as e:  # the statement around it breaks instead
            e.cause = e.cause or cause or (span, reason)
            raise
        index = self.stubs.setdefault(plan.stub, len(self.stubs))
        self._mark_changed(stmt, frame)
        for n in plan.deleted:
            frame.locals.pop(n, None)
        kwargs = [("_after", self.last_stub)] if self.last_stub else []
        written = {builder.name_of(t) for t in plan.tensor_outputs.values()}
        readers = _readers(builder.nodes, written)
        if readers:
            kwargs.append(("_reads", readers))
        target = str(index)
        if plan.stub.returns:  # its value is the function's result
            name = builder.add(
                "fallback", target, plan.args, kwargs, Opaque(), span, base="fallback"
            )
            self.last_stub = Ref(name)
            raise _Return(OpaqueValue(name))
        metas = tuple(
            (
                TensorMeta.of(plan.tensor_outputs[n])
                if n in plan.tensor_outputs
                else Opaque()
            )
            for n in plan.stub.outputs
        )
        name = builder.add(
            "fallback", target, plan.args, kwargs, metas, span, base="fallback"
        )
        self.last_stub = Ref(name)
        fresh = _fresh_memory(list(plan.tensor_outputs.values()))
        stale = {
            id(alias): alias
            for old in plan.tensor_outputs.values()
            for alias in builder.aliases(old)
            if id(alias) not in fresh
        }
        for i, (n, meta) in enumerate(zip(plan.stub.outputs, metas)):
            item = builder.add(
                "call", "getitem", (Ref(name), i), (), meta, span, base=n
            )
            if isinstance(meta, TensorMeta):
                old = plan.tensor_outputs[n]
                value = fresh[id(old)]
                if builder.owned_by_caller(old):  # still the caller's memory
                    builder.own(value)
                builder.bind(value, item)
            else:
                value = OpaqueValue(item, n in plan.stub.unbound_outputs)
            frame.locals[n] = value
        self._rederive_aliases(
            stale.values(),
            [(t, fresh[id(t)]) for t in plan.tensor_outputs.values()],
        )

    def _rederive_aliases(
        self, aliases, written: list[tuple[torch.Tensor, torch.Tensor]]
    ):
        """Tensors sharing memory with what fallback code wrote in place (views
        taken before it) hold new values: each is re-derived from the new value of
        a written tensor (`written`: old and new) that covered all of that memory
        (`as_strided` with its own strides and offset). Memory the caller owns may
        start elsewhere at run time, and some memory no tensor covers: reading
        those is a graph break."""
        builder = self.recorder.builder
        for alias in aliases:
            memory = memory_of(alias)
            whole = next(
                (
                    new
                    for old, new in written
                    if memory_of(old) == memory
                    and covers(old)
                    and old.dtype == alias.dtype
                    and not builder.owned_by_caller(old)
                ),
                None,
            )
            if whole is None:
                builder.mark_stale(alias)
            else:
                self.recorder.rederive(alias, whole)

    def _exec_stmt(self, stmt: cst.CSTNode, frame: Frame) -> None:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                self.exec_small(small, frame)
            return
        if isinstance(stmt, cst.BaseSmallStatement):  # one-line suite: `if c: x = 1`
            self.exec_small(stmt, frame)
            return
        handler = getattr(self, f"exec_{type(stmt).__name__}", None)
        if handler is None:
            raise Unsupported(
                f"unsupported statement: {type(stmt).__name__}", self._span()
            )
        handler(stmt, frame)

    def exec_small(self, stmt, frame: Frame) -> None:
        kind = type(stmt).__name__
        if kind == "Assign":
            value = self.eval(stmt.value, frame)
            for target in stmt.targets:
                self.assign(target.target, value, frame)
        elif kind == "AnnAssign":
            if stmt.value is not None:
                self.assign(stmt.target, self.eval(stmt.value, frame), frame)
        elif kind == "AugAssign":
            if self._masked_update(stmt, frame):
                return
            op = AUG_OPS[type(stmt.operator).__name__]
            current = self.eval(stmt.target, frame)
            self.assign(stmt.target, op(current, self.eval(stmt.value, frame)), frame)
        elif kind == "Expr":
            if not isinstance(stmt.value, (cst.SimpleString, cst.ConcatenatedString)):
                self.eval(stmt.value, frame)
        elif kind == "Return":
            raise _Return(None if stmt.value is None else self.eval(stmt.value, frame))
        elif kind == "Pass":
            pass
        elif kind == "Break":
            raise _Break()
        elif kind == "Continue":
            raise _Continue()
        elif kind in ("Import", "ImportFrom"):
            self._import(stmt, frame)
        elif kind == "Nonlocal":
            frame.nonlocals.update(n.name.value for n in stmt.names)
        elif kind == "Global":
            raise Unsupported("`global`: assigns module state", self._span())
        elif kind == "Raise":
            error = _users(self._exception(stmt, frame))
            error.transpile_raised = True  # by the source, whatever its type
            raise error
        elif kind == "Assert":
            test = self.eval(stmt.test, frame)
            if isinstance(test, torch.Tensor):
                raise Unsupported("assert on tensor data, checked at run time")
            if not test:
                message = () if stmt.msg is None else (self.eval(stmt.msg, frame),)
                raise _users(AssertionError(*message))
        else:
            raise Unsupported(f"unsupported statement: {kind}", self._span())

    def _import(self, stmt, frame: Frame) -> None:
        """`import m`, `from .m import n as k`: Python imports a module once, so
        importing it here gives what every call of the source gets."""
        if isinstance(stmt, cst.Import):
            for alias in stmt.names:
                dotted = cst.Module([]).code_for_node(alias.name)
                module = _users_import(dotted)
                if alias.asname is None:  # `import a.b` binds `a`
                    frame.locals[dotted.split(".")[0]] = sys.modules[
                        dotted.split(".")[0]
                    ]
                else:
                    frame.locals[alias.asname.name.value] = module
            return
        if isinstance(stmt.names, cst.ImportStar):
            raise Unsupported("`from ... import *`", self._span())
        dotted = (
            "" if stmt.module is None else cst.Module([]).code_for_node(stmt.module)
        )
        relative = "." * len(stmt.relative)
        package = frame.globals.get("__package__") or ""
        module = _users_import(importlib.util.resolve_name(relative + dotted, package))
        for alias in stmt.names:
            name = alias.name.value
            if not hasattr(module, name):  # a submodule not imported yet
                _users_import(f"{module.__name__}.{name}")
            value = _apply(getattr, module, name)
            frame.locals[name if alias.asname is None else alias.asname.name.value] = (
                value
            )

    def _exception(self, stmt: cst.Raise, frame: Frame) -> BaseException:
        """What `raise E(...)` raises (`raise E` makes an instance, `from` sets the
        cause); a bare `raise` re-raises what only fallback code would be handling."""
        if stmt.exc is None:
            raise Unsupported("`raise` of the exception being handled")
        error = self.eval(stmt.exc, frame)
        if isinstance(error, type) and issubclass(error, BaseException):
            error = error()
        if not isinstance(error, BaseException):
            return TypeError("exceptions must derive from BaseException")
        if stmt.cause is not None:
            cause = self.eval(stmt.cause.item, frame)
            error.__cause__ = cause() if isinstance(cause, type) else cause
        return error

    def eval_NamedExpr(self, expr: cst.NamedExpr, frame: Frame) -> Any:
        value = self.eval(expr.value, frame)
        self.assign(expr.target, value, frame)
        return value

    def exec_FunctionDef(self, stmt: cst.FunctionDef, frame: Frame) -> None:
        """A nested `def`: a `Closure` over this frame, decorated as Python does
        (the decorators evaluated first, applied innermost first)."""
        if stmt.asynchronous is not None:
            raise Unsupported("`async def`", self._span())
        decorators = [self.eval(d.decorator, frame) for d in stmt.decorators]
        name = stmt.name.value
        fn: Any = Closure(self, stmt, frame, self._signature(stmt.params, frame), name)
        for decorator in reversed(decorators):
            fn = self.call(decorator, (fn,), {})
        self.assign(stmt.name, fn, frame)

    def eval_Lambda(self, expr: cst.Lambda, frame: Frame) -> Closure:
        signature = self._signature(expr.params, frame)
        return Closure(self, expr, frame, signature, "<lambda>")

    def _signature(self, params: cst.Parameters, frame: Frame) -> inspect.Signature:
        """The signature of a nested function, its defaults evaluated now."""
        P = inspect.Parameter
        out = []

        def add(param: cst.Param, kind) -> None:
            default = P.empty
            if param.default is not None:
                default = self.eval(param.default, frame)
            out.append(P(param.name.value, kind, default=default))

        for param in params.posonly_params:
            add(param, P.POSITIONAL_ONLY)
        for param in params.params:
            add(param, P.POSITIONAL_OR_KEYWORD)
        if isinstance(params.star_arg, cst.Param):
            add(params.star_arg, P.VAR_POSITIONAL)
        for param in params.kwonly_params:
            add(param, P.KEYWORD_ONLY)
        if params.star_kwarg is not None:
            add(params.star_kwarg, P.VAR_KEYWORD)
        return inspect.Signature(out)

    def exec_If(self, stmt: cst.If, frame: Frame) -> None:
        if self.static(stmt.test, frame, "if"):
            self.exec_block(stmt.body, frame)
        elif isinstance(stmt.orelse, cst.If):
            self.exec_stmt(stmt.orelse, frame)
        elif stmt.orelse is not None:
            self.exec_block(stmt.orelse.body, frame)

    def exec_For(self, stmt: cst.For, frame: Frame) -> None:
        iterable = self._iterable(self.eval(stmt.iter, frame))
        for item in iterable:
            self.assign(stmt.target, item, frame)
            try:
                self.exec_block(stmt.body, frame)
            except _Continue:
                continue
            except _Break:
                break
        else:
            if stmt.orelse is not None:
                self.exec_block(stmt.orelse.body, frame)

    def _iterable(self, value):
        """What a `for` or a comprehension iterates over. A tensor is its slices
        along the first dimension, as `Tensor.__iter__` gives them (`unbind(0)`):
        the loop is unrolled once a slice, as over a list; with a dynamic first
        dimension the unrolled loops differ between the sizes compiled and the
        variant runs the source (Note [Dynamic dimensions])."""
        if not isinstance(value, torch.Tensor):
            return value
        if value.dim() == 0:
            raise Unsupported("iteration over a 0-d tensor", self._span())
        return value.unbind(0)

    def exec_While(self, stmt: cst.While, frame: Frame) -> None:
        for i in range(MAX_UNROLL):
            test = self.eval(stmt.test, frame)
            if isinstance(test, torch.Tensor) and i == 0:
                return self.tensor_while(stmt, frame, test)
            if isinstance(test, torch.Tensor):
                raise Unsupported("`while` condition turns into tensor data")
            if not test:
                break
            try:
                self.exec_block(stmt.body, frame)
            except _Continue:
                continue
            except _Break:
                return
        else:
            raise Unsupported("`while` loop too long to unroll", self._span())
        if stmt.orelse is not None:
            self.exec_block(stmt.orelse.body, frame)

    def tensor_while(self, stmt: cst.While, frame: Frame, cond: torch.Tensor) -> None:
        """`while <tensor data>:` becomes a Python loop around a compiled body whose
        tensors (the carried values) keep their metadata from one iteration to the
        next; see `LoopBody`."""
        names = Names()
        stmt.body.visit(names)
        carried = tuple(names.assigned)
        if (
            stmt.orelse is not None
            or contains_jump(stmt.body)
            or not all(isinstance(frame.locals.get(n), torch.Tensor) for n in carried)
        ):
            raise Unsupported("`while` on tensor data that updates more than tensors")
        span = self._span()
        builder = self.recorder.builder
        mark, branches, last_stub = (
            builder.checkpoint(),
            len(self.branches),
            self.last_stub,
        )
        before = {n: frame.locals[n] for n in carried}
        self.in_tensor_loop += 1
        try:
            placeholders = []
            for n in carried:
                t = _like(before[n])
                placeholders.append(
                    builder.add("input", f"{n}_loop", meta=TensorMeta.of(t))
                )
                builder.bind(t, placeholders[-1])
                frame.locals[n] = t
            self.exec_block(stmt.body, frame)
            after = self.eval(stmt.test, frame)
            nested = any(n.is_loop for n in builder.nodes[mark.nodes :])
            if (
                not isinstance(after, torch.Tensor)
                or len(self.branches) != branches
                or nested
            ):
                raise Unsupported("`while` on tensor data with other conditions inside")
            if any(
                TensorMeta.of(frame.locals[n]) != TensorMeta.of(before[n])
                for n in carried
            ):
                raise Unsupported("a `while` loop changes the shape of what it updates")
            outputs = (
                *(builder.ref(frame.locals[n], span) for n in carried),
                builder.ref(after, span),
            )
            body = LoopBody(
                subgraph(builder.nodes, mark.nodes, len(builder.nodes), outputs),
                tuple(placeholders),
                span,
            )
        finally:
            self.in_tensor_loop -= 1
            builder.rollback(mark)
            self.last_stub = last_stub
            frame.locals.update(before)
        index = self.loops.setdefault(
            str(body.graph) + repr(body.carried), (len(self.loops), body)
        )[0]
        outer = [
            Ref(n.name)
            for n in body.graph.nodes
            if n.op == "input" and n.name not in placeholders
        ]
        args = (
            builder.ref(cond, span),
            *(builder.ref(before[n], span) for n in carried),
            *outer,
        )
        kwargs = (("_after", self.last_stub),) if self.last_stub else ()
        metas = tuple(TensorMeta.of(before[n]) for n in carried)
        name = builder.add("loop", str(index), args, kwargs, metas, span, base="loop")
        self.last_stub = Ref(name)
        for i, n in enumerate(carried):
            t = _like(before[n])
            builder.bind(
                t,
                builder.add(
                    "call", "getitem", (Ref(name), i), (), metas[i], span, base=n
                ),
            )
            frame.locals[n] = t

    def exec_Try(self, stmt: cst.Try, frame: Frame) -> None:
        """`try` on the path being traced, as Python runs it: the body; a handler
        when the body raises for these inputs (it would on every call); `else`;
        `finally` on the way out, a `return` included.

        Compiled code cannot catch what fallback code or an op checking tensor
        data raises when it runs, so a body with handlers that holds either
        becomes fallback code whole."""
        start = len(self.recorder.builder.nodes)
        try:
            try:
                self.exec_block(stmt.body, frame)
            except UserCodeError as e:
                handler = self._handler(stmt, e.error, frame)
                if handler is None:
                    raise
                self._handle(handler, e.error, frame)
            else:
                if stmt.handlers and self._may_raise_later(start):
                    raise Unsupported("`try` around code that may raise when run")
                if stmt.orelse is not None:
                    self.exec_block(stmt.orelse.body, frame)
        except (Unsupported, Retrace, UserCodeError):
            raise  # the statement is undone, or the run fails: no `finally` here
        except BaseException:
            self._finally(stmt, frame)
            raise
        self._finally(stmt, frame)

    def _finally(self, stmt: cst.Try, frame: Frame) -> None:
        if stmt.finalbody is not None:
            self.exec_block(stmt.finalbody.body, frame)

    def _may_raise_later(self, start: int) -> bool:
        """Whether what the body recorded since node `start` may raise at run time:
        fallback code (loops on tensor data hold some), or an op that checks
        tensor data."""
        return any(
            n.target in CHECKS_DATA or n.is_fallback or n.is_loop
            for n in self.recorder.builder.nodes[start:]
        )

    def _handler(self, stmt: cst.Try, error: BaseException, frame: Frame):
        """The first `except` clause of `stmt` that catches `error`, or None."""
        for handler in stmt.handlers:
            if handler.type is None:
                return handler
            caught = self.eval(handler.type, frame)
            if isinstance(error, caught):
                return handler
        return None

    def _handle(self, handler: cst.ExceptHandler, error, frame: Frame) -> None:
        name = handler.name.name.value if handler.name is not None else None
        if name is not None:
            frame.locals[name] = error
        try:
            self.exec_block(handler.body, frame)
        finally:
            if name is not None:  # Python unbinds it when the handler ends
                frame.locals.pop(name, None)

    def exec_With(self, stmt: cst.With, frame: Frame) -> None:
        builder = self.recorder.builder
        grad = builder.grad
        for item in stmt.items:
            ctx = self.eval(item.item, frame)
            if not isinstance(ctx, NO_EFFECT_CONTEXTS) or item.asname is not None:
                raise Unsupported("unsupported `with` context", self._span())
            grad = _grad_inside(ctx, grad)
        builder.grad, outside = grad, builder.grad  # recorded on each node
        try:
            self.exec_block(stmt.body, frame)
        finally:
            builder.grad = outside

    def static(self, expr, frame: Frame, what: str) -> bool:
        value = self.eval(expr, frame)
        if isinstance(value, torch.Tensor):
            if what == "while":
                raise Unsupported("`while` on tensor data", self._span())
            return self.decide(value)
        if _is_int(value):
            self.comparisons.append((self._span(), "NotEqual", value, 0, value != 0))
        return bool(value)

    def decide(self, cond: torch.Tensor) -> bool:
        """The outcome of a condition on tensor data, on the path being traced."""
        ref = self.recorder.builder.ref(cond, self._span())
        for b in self.branches:
            if b.cond == ref:  # the same tensor again: the same outcome
                return b.taken
        k = len(self.branches)
        if k >= MAX_BRANCHES:
            raise Unsupported("too many conditions on tensor data", self._span())
        taken = self.decisions[k] if k < len(self.decisions) else True
        position = len(self.recorder.builder.nodes)
        self.branches.append(BranchPoint(position, ref, self._span(), taken))
        return taken

    def assign(self, target, value, frame: Frame) -> None:
        if isinstance(target, cst.Name):
            name = target.value
            scope = frame.locals
            if name in frame.nonlocals:  # the enclosing function's own binding
                scope = next((s for s in frame.enclosing if name in s), scope)
            scope[name] = value
        elif isinstance(target, (cst.Tuple, cst.List)):
            self._unpack(target.elements, value, frame)
        elif isinstance(target, cst.Attribute) and (
            id(obj := _lookup(target.value, frame)) in self.created
            or id(obj) in self.inputs
        ):
            self._set_attribute(obj, target.attr.value, value)
        elif isinstance(target, cst.Attribute) and _holds(
            _lookup(target.value, frame), target.attr.value, value
        ):  # `self.count += 1` sets the buffer it updated in place: no change
            pass
        elif (
            isinstance(target, cst.Attribute)
            and _plain_attribute(
                obj := _lookup(target.value, frame), target.attr.value, value
            )
            and id(obj) in self.module_paths
        ):
            self._set_model_state(obj, target.attr.value, value)
        elif isinstance(target, cst.Subscript) and (
            self._local_item(target, frame)
            or isinstance(_lookup(target.value, frame), torch.Tensor)
        ):  # a tensor's item: an in-place op (Note [Writes into the caller's
            # tensors] in recorder.py)
            container = self.eval(target.value, frame)
            index = [self._slice(e.slice, frame) for e in target.slice]
            key = index[0] if len(index) == 1 else tuple(index)
            _apply(operator.setitem, container, key, value)
        elif isinstance(target, cst.Attribute):
            raise Unsupported(
                f"sets .{target.attr.value} of an object the call did not make",
                self._span(),
            )
        else:
            raise Unsupported(
                f"assignment to {type(target).__name__.lower()} is not compiled",
                self._span(),
            )

    def _masked_update(self, stmt: cst.AugAssign, frame: Frame) -> bool:
        """`x[mask] op= v`, as Note [Masked updates] computes it; False (nothing
        evaluated) for any other augmented assignment."""
        target, op = stmt.target, MASKED_UPDATES.get(type(stmt.operator).__name__)
        if op is None or not isinstance(target, cst.Subscript):
            return False
        if len(target.slice) != 1 or not isinstance(target.slice[0].slice, cst.Index):
            return False
        if not isinstance(_lookup(target.value, frame), torch.Tensor):
            return False
        base = self.eval(target.value, frame)
        key = self._slice(target.slice[0].slice, frame)
        value = self.eval(stmt.value, frame)
        rank = key.dim() if isinstance(key, torch.Tensor) else 0
        selects = (
            isinstance(key, torch.Tensor)
            and key.dtype == torch.bool
            and 0 < rank <= base.dim()
            and tuple(key.shape) == tuple(base.shape[:rank])
        )
        same = isinstance(value, (bool, int, float)) or (
            isinstance(value, torch.Tensor) and value.dim() <= base.dim() - rank
        )
        if selects and same and torch.result_type(base, value) == base.dtype:
            mask = key.view(*key.shape, *[1] * (base.dim() - rank))
            new = torch.where(mask, _apply(op, base, value), base)
            _apply(torch.Tensor.copy_, base, new)
            return True
        current = _apply(operator.getitem, base, key)
        in_place = AUG_OPS[type(stmt.operator).__name__]
        _apply(operator.setitem, base, key, _apply(in_place, current, value))
        return True

    def _local_item(self, target: cst.Subscript, frame: Frame) -> bool:
        """Whether `target` is an item of a dict or list that this call made (not
        one that code outside it can see): setting it is Python state of the
        call, set here as on every call."""
        container = _lookup(target.value, frame)
        return (
            isinstance(container, (dict, list))
            and id(container) not in self.shared
            and isinstance(target.value, cst.Name)
            and target.value.value in frame.locals
        )

    def _unpack(self, elements, value, frame: Frame) -> None:
        values = list(value)
        star = [i for i, e in enumerate(elements) if isinstance(e, cst.StarredElement)]
        if not star:
            if len(values) != len(elements):
                raise Unsupported("unpacking length mismatch", self._span())
            for e, v in zip(elements, values):
                self.assign(e.value, v, frame)
            return
        i = star[0]
        tail = len(elements) - i - 1
        for e, v in zip(elements[:i], values[:i]):
            self.assign(e.value, v, frame)
        self.assign(elements[i].value, values[i : len(values) - tail], frame)
        for e, v in zip(elements[i + 1 :], values[len(values) - tail :]):
            self.assign(e.value, v, frame)

    # ---- expressions ----------------------------------------------------------

    def eval(self, expr, frame: Frame) -> Any:
        handler = getattr(self, f"eval_{type(expr).__name__}", None)
        if handler is None:
            raise Unsupported(
                f"unsupported expression: {type(expr).__name__}", self._span()
            )
        return handler(expr, frame)

    def eval_Name(self, expr: cst.Name, frame: Frame) -> Any:
        name = expr.value
        scope = next((s for s in (frame.locals, *frame.enclosing) if name in s), None)
        if scope is not None:
            value = scope[name]
            if isinstance(value, OpaqueValue) and value.maybe_unbound:
                raise Unsupported(f"reads {name}, which may be unassigned")
            return value
        if name in frame.globals:
            value = frame.globals[name]
            module = frame.globals.get("__name__")
            if isinstance(module, str) and guardable(value):
                self.guards[GlobalRead(module, name)] = value
            return self._share(value)
        if name in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[name]
        if hasattr(builtins, name):
            return getattr(builtins, name)
        raise _users(NameError(f"name {name!r} is not defined"))

    def eval_Attribute(self, expr: cst.Attribute, frame: Frame) -> Any:
        base = self.eval(expr.value, frame)
        attr = expr.attr.value
        changed = self.changed.get(id(base), ())
        if attr in changed or None in changed:
            raise Unsupported(f"reads .{attr}, which fallback code may have changed")
        value = _apply(getattr, base, attr)
        if attr in DEVICE_QUERIES and _traced(base):  # Note [The variant's device]
            value = DEVICE_QUERIES[attr](torch.device(self.device))
        if id(base) not in self.created:  # state outside the call
            value = self._share(value)
        path = self.module_paths.get(id(base))
        if path is None or self.set_here(base, attr):  # the call's own value
            return value
        if guardable(value):
            self.guards[AttrRead(path, attr)] = value
        elif isinstance(value, nn.Module) and id(value) in self.module_paths:
            self.guards[ModuleRead(self.module_paths[id(value)], called=False)] = None
        elif _is_config(value):  # `self.config.n_head` too
            self.module_paths.add(value, f"{path}.{attr}")
        return value

    def eval_Call(self, expr: cst.Call, frame: Frame) -> Any:
        fn = self.eval(expr.func, frame)
        args: list = []
        kwargs: dict = {}
        for arg in expr.args:
            value = self.eval(arg.value, frame)
            if arg.star == "*":
                args.extend(value)
            elif arg.star == "**":
                kwargs.update(value)
            elif arg.keyword is not None:
                kwargs[arg.keyword.value] = value
            else:
                args.append(value)
        if fn is builtins.super and not args and not kwargs:
            return self._super(frame)
        return self.call(fn, tuple(args), kwargs)

    def _super(self, frame: Frame) -> Any:
        """`super()` in a method: Python passes the class being defined (the
        `__class__` cell, a free variable of the method) and the first argument."""
        visible = frame.visible()
        cls = visible.get("__class__")
        if not isinstance(cls, type) or frame.self_name not in visible:
            raise Unsupported("super() outside a method", self._span())
        return super(cls, visible[frame.self_name])

    def eval_BinaryOperation(self, expr, frame: Frame) -> Any:
        op = BINARY_OPS[type(expr.operator).__name__]
        left, right = self.eval(expr.left, frame), self.eval(expr.right, frame)
        if op is operator.mod and isinstance(left, (str, bytes)) and _has_opaque(right):
            raise Unsupported(FORMATS_OPAQUE)  # `"%r" % (x,)`: the text is run time's
        return _apply(op, left, right)

    def eval_UnaryOperation(self, expr, frame: Frame) -> Any:
        value = self.eval(expr.expression, frame)
        if isinstance(expr.operator, cst.Not) and isinstance(value, torch.Tensor):
            return not self.decide(value)
        return _apply(UNARY_OPS[type(expr.operator).__name__], value)

    def eval_BooleanOperation(self, expr, frame: Frame) -> Any:
        left = self.eval(expr.left, frame)
        truth = self.decide(left) if isinstance(left, torch.Tensor) else bool(left)
        if isinstance(expr.operator, cst.And):
            return self.eval(expr.right, frame) if truth else left
        return left if truth else self.eval(expr.right, frame)

    def eval_Comparison(self, expr: cst.Comparison, frame: Frame) -> Any:
        left = self.eval(expr.left, frame)
        result: Any = True
        for target in expr.comparisons:
            right = self.eval(target.comparator, frame)
            op = type(target.operator).__name__
            if isinstance(left, OpaqueValue) or isinstance(right, OpaqueValue):
                # `is None` included: only the run-time value can say
                raise Unsupported("compares a value computed by fallback code")
            result = _apply(COMPARE_OPS[op], left, right)
            if _is_int(left) and _is_int(right):
                self.comparisons.append((self._span(), op, left, right, result))
            if isinstance(result, torch.Tensor):
                if len(expr.comparisons) > 1:
                    raise Unsupported("chained comparison of tensors", self._span())
                return result
            if not result:
                return False
            left = right
        return result

    def eval_IfExp(self, expr: cst.IfExp, frame: Frame) -> Any:
        if self.static(expr.test, frame, "if"):
            return self.eval(expr.body, frame)
        return self.eval(expr.orelse, frame)

    def eval_Subscript(self, expr: cst.Subscript, frame: Frame) -> Any:
        value = self.eval(expr.value, frame)
        index = [self._slice(e.slice, frame) for e in expr.slice]
        item = _apply(
            operator.getitem, value, index[0] if len(index) == 1 else tuple(index)
        )
        return self._share(item) if id(value) in self.shared else item

    def _share(self, value: Any) -> Any:
        """Note a mutable container that code outside this call can see."""
        if isinstance(value, CONTAINERS):
            self.shared.add(id(value))
            self._held.append(value)
        return value

    def _slice(self, s, frame: Frame) -> Any:
        if isinstance(s, cst.Index):
            return self.eval(s.value, frame)
        part = [
            None if p is None else self.eval(p, frame)
            for p in (s.lower, s.upper, s.step)
        ]
        return slice(*part)

    def eval_Tuple(self, expr, frame: Frame) -> tuple:
        return tuple(self._elements(expr.elements, frame))

    def eval_List(self, expr, frame: Frame) -> list:
        return self._elements(expr.elements, frame)

    def eval_Set(self, expr, frame: Frame) -> set:
        return set(self._elements(expr.elements, frame))

    def _elements(self, elements, frame: Frame) -> list:
        out: list = []
        for e in elements:
            if isinstance(e, cst.StarredElement):
                out.extend(self.eval(e.value, frame))
            else:
                out.append(self.eval(e.value, frame))
        return out

    def eval_Dict(self, expr: cst.Dict, frame: Frame) -> dict:
        out: dict = {}
        for e in expr.elements:
            if isinstance(e, cst.StarredDictElement):
                out.update(self.eval(e.value, frame))
            else:
                out[self.eval(e.key, frame)] = self.eval(e.value, frame)
        return out

    def eval_ListComp(self, expr: cst.ListComp, frame: Frame) -> list:
        return list(self._comprehend(expr.for_in, expr.elt, frame))

    def eval_SetComp(self, expr: cst.SetComp, frame: Frame) -> set:
        return set(self._comprehend(expr.for_in, expr.elt, frame))

    def eval_DictComp(self, expr: cst.DictComp, frame: Frame) -> dict:
        pair = cst.Tuple([cst.Element(expr.key), cst.Element(expr.value)])
        return dict(self._comprehend(expr.for_in, pair, frame))

    def eval_GeneratorExp(self, expr: cst.GeneratorExp, frame: Frame):
        """A generator, as lazy as Python's: `all(...)` stops at the first false
        element and evaluates no more."""
        return self._comprehend(expr.for_in, expr.elt, frame)

    def _comprehend(self, for_in, elt, frame: Frame):
        """The elements of a comprehension, from a generator. As in Python, the
        outermost iterable is evaluated at once, in the enclosing frame, and the
        rest in a scope of the comprehension's own."""
        iterable = self._iterable(self.eval(for_in.iter, frame))
        scope = Frame(
            frame.src,
            {},
            frame.globals,
            frame.self_name,
            (frame.locals, *frame.enclosing),
        )
        return self._elements_of(for_in, iter(iterable), elt, scope)

    def _elements_of(self, for_in, iterable, elt, scope: Frame):
        for item in iterable:
            self.assign(for_in.target, item, scope)
            if not all(self.static(c.test, scope, "if") for c in for_in.ifs):
                continue
            inner = for_in.inner_for_in
            if inner is None:
                yield self.eval(elt, scope)
                continue
            values = self._iterable(self.eval(inner.iter, scope))
            yield from self._elements_of(inner, iter(values), elt, scope)

    def eval_Integer(self, expr, frame: Frame) -> Any:
        return expr.evaluated_value

    eval_Float = eval_Imaginary = eval_SimpleString = eval_Integer
    eval_ConcatenatedString = eval_Integer

    def eval_FormattedString(self, expr: cst.FormattedString, frame: Frame) -> str:
        parts = []
        for part in expr.parts:
            if isinstance(part, cst.FormattedStringText):
                parts.append(part.value)
                continue
            value = self.eval(part.expression, frame)
            if _has_opaque(value):
                raise Unsupported(FORMATS_OPAQUE)
            if part.conversion:
                value = {"r": repr, "s": str, "a": ascii}[part.conversion](value)
            spec = ""
            if part.format_spec:
                spec = self.eval(cst.FormattedString(parts=part.format_spec), frame)
            parts.append(format(value, spec))
        return "".join(parts)

    def eval_Ellipsis(self, expr, frame: Frame) -> Any:
        return Ellipsis

    def _span(self) -> Span | None:
        return self.recorder.span


# Note [Model state the call sets]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Some forwards set plain attributes of their modules (HF Swin clamps a layer's
# `shift_size` and `window_size` to the input's resolution on every call). Such a
# write of a plain value (a number, a string, a tuple of them) is made here, so
# what follows reads the new value, and undone when the trace ends; the variant
# sets the module's attribute to its final value when it starts, after its
# guards (`variant_function` in codegen/wrapper.py), as each eager call does.
# Setting it first is the same as setting it where the source does, because
#
# - the value is a constant of the variant, decided by what the guards check;
# - no fallback code runs before the write (fallback code after it reads the new
#   value, as eager's does), and no condition on tensor data precedes it;
# - what compiled code reads of the attribute is read here;
# - a read before the write that saw another value is refused: the next call
#   would fail that guard, where eager would read the value this call left.
#
# Reads after the write are the call's own value, not guarded. A training step
# keeps such writes as fallback code.
def _plain_attribute(obj: Any, name: str, value: Any) -> bool:
    """Whether `obj.name = value` sets a plain value into a module's `__dict__`:
    not a parameter, buffer or submodule, nor through a property."""
    if not isinstance(obj, nn.Module) or not guardable(value):
        return False
    if type(obj).__setattr__ is not nn.Module.__setattr__:
        return False
    if any(name in table for table in (obj._parameters, obj._buffers, obj._modules)):
        return False
    return not hasattr(inspect.getattr_static(type(obj), name, None), "__set__")


def _restore(obj: Any, name: str, old: Any) -> None:
    """Put back `obj.name` as it was before a write (`_MISSING`: unset)."""
    if old is _MISSING:
        object.__delattr__(obj, name)
    else:
        object.__setattr__(obj, name, old)


def _same_value(a: Any, b: Any) -> bool:
    """Equal, and of the same type (a guard compares both)."""
    return type(a) is type(b) and a == b


def _has_opaque(value: Any) -> bool:
    """Whether a value computed by fallback code is in `value`, or in a list,
    tuple or dict inside it (`torch.cat([t, x])`)."""
    return _contains(value, OpaqueValue)


def _contains(value: Any, kind: type) -> bool:
    """Whether `value`, or a list, tuple or dict inside it, holds a `kind`."""
    if isinstance(value, kind):
        return True
    if isinstance(value, (list, tuple)):
        return any(_contains(v, kind) for v in value)
    if isinstance(value, dict):
        return any(_contains(v, kind) for v in value.values())
    return False


# Conversions that return their input where it is already as asked
RETURNS_ITS_INPUT = frozenset({"to", "cpu", "cuda", "type", "as_tensor", "asarray"})

# Note [The variant's device]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Tensors are traced on the meta device, and each variant is compiled for one
# device, which its guards check. So where the source asks a traced tensor for its
# device (`x.device.type == "cpu"`, `x.is_cuda`: transformers' mixture of experts
# picks its histogram's dtype by it), it gets the variant's device, as eager
# would, not "meta". That device, without a GPU's number, then stands for meta
# where a call takes it: a factory (`torch.zeros(n, device=x.device)`) makes a
# traced tensor, and a move to it (`mask.to(x.device)`) is the tensor itself.
DEVICE_QUERIES = {
    "device": lambda device: device,
    "is_cuda": lambda device: device.type == "cuda",
    "is_cpu": lambda device: device.type == "cpu",
    "is_meta": lambda device: False,
}


# Note [Custom autograd functions]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# `MyFunction.apply(x)` of a `torch.autograd.Function` (BLOOM's GELU, timm's
# memory-efficient activations) computes its `forward`; its `backward` matters only
# where a gradient flows. A variant that is not a training step runs only where
# none does (its guard: no grad mode, or nothing it reads requires grad), so there
# the forward is interpreted as any other function, with a context that keeps
# what the forward saves and answers that no input needs a gradient. A training
# step keeps the call as fallback code: the Function's own backward, which may
# not be the forward's derivative (a straight-through estimator), is eager's.
_SETUP_CONTEXT = torch.autograd.Function.setup_context


class FunctionContext:
    """The `ctx` of a custom Function's forward where no gradient flows."""

    def __init__(self, inputs: int):
        self.needs_input_grad = (False,) * inputs
        self.saved_tensors: tuple = ()

    def save_for_backward(self, *tensors) -> None:
        self.saved_tensors = tensors

    def save_for_forward(self, *tensors) -> None:
        pass

    def mark_dirty(self, *tensors) -> None:
        pass

    def mark_non_differentiable(self, *tensors) -> None:
        pass

    def set_materialize_grads(self, value: bool) -> None:
        pass


def _custom_forward(fn: Any):
    """The forward of `fn` if it is `apply` of a custom autograd Function."""
    owner = getattr(fn, "__self__", None)
    if getattr(fn, "__name__", None) != "apply" or not isinstance(owner, type):
        return None
    if not issubclass(owner, torch.autograd.Function):
        return None
    forward = owner.forward
    return forward if isinstance(forward, types.FunctionType) else None


def _autocast_off(fn: Any, args: tuple, kwargs: dict) -> bool:
    """Whether `fn(*args, **kwargs)` is `torch.autocast(..., enabled=False)`: no
    autocast inside, which a variant computes everywhere (efficientvit's
    attention turns it off for its kernel); one that turns it on stays a graph
    break."""
    if not (isinstance(fn, type) and issubclass(fn, torch.autocast)):
        return False
    at = 2 if fn is torch.autocast else 0  # torch.cuda.amp.autocast(enabled, ...)
    enabled = args[at] if len(args) > at else kwargs.get("enabled", True)
    return enabled is False


# Note [Constant results]
# ~~~~~~~~~~~~~~~~~~~~~~~
# A function marked as `torch._dynamo.assume_constant_result` marks it (an
# attribute, `_dynamo_marked_constant`; transformers marks its install probes and
# version checks so, under their `lru_cache`) returns the same for the life of the
# process: it is called here, once, and its result is a constant of the variant,
# as torch.compile takes it. Called with tensors, it is traced as any other.
def _marked_constant(fn: Any) -> bool:
    while fn is not None:
        if getattr(fn, "_dynamo_marked_constant", False) is True:
            return True
        fn = getattr(fn, "__wrapped__", None)
    return False


def _device(value: Any) -> torch.device | None:
    """`value` as a device, if it is one or names one."""
    if not isinstance(value, (str, torch.device)):
        return None
    try:
        return torch.device(value)
    except (RuntimeError, TypeError):
        return None


def _traced(value: Any) -> bool:
    """Whether `value` is a tensor the interpreter traces (on the meta device)."""
    return isinstance(value, torch.Tensor) and value.device.type == "meta"


MAX_LITERAL = 64  # elements of a `torch.tensor([...])` built from scalars


def _python_data(data: Any) -> bool:
    """Numbers, or (nested) lists and tuples of them: no tensor inside."""
    if isinstance(data, (list, tuple)):
        return all(_python_data(d) for d in data)
    return isinstance(data, (bool, int, float)) and not isinstance(data, torch.Tensor)


def tensor_of_data(data, dtype=None, device=None, requires_grad=False, **kwargs):
    """`torch.tensor(data)` of Python numbers, made of ops the recorder sees (on
    meta, `torch.tensor` makes its data where no op records it): `empty` for no
    elements, `scalar_tensor` for one, a `stack` of them for a few."""
    if requires_grad or kwargs.get("pin_memory"):
        raise Unsupported("torch.tensor(..., requires_grad/pin_memory)")
    with torch.utils._python_dispatch._disable_current_modes():
        real = torch.tensor(data, dtype=dtype, device="cpu")
        shape, values = tuple(real.shape), real.flatten().tolist()
    like = {"dtype": real.dtype, "device": device}
    if not values:
        return torch.empty(shape, **like)
    if len(values) > MAX_LITERAL:
        raise Unsupported(f"torch.tensor of more than {MAX_LITERAL} numbers")
    items = [torch.scalar_tensor(v, **like) for v in values]
    if not shape:
        return items[0]
    return torch.stack(items).reshape(shape)


def _is_config(value: Any) -> bool:
    """A plain object holding settings (a dataclass, a namespace): its attributes
    read by the model are guarded like the module's own."""
    return hasattr(value, "__dict__") and not isinstance(
        value,
        (
            torch.Tensor,
            nn.Module,
            type,
            types.FunctionType,
            types.MethodType,
            types.ModuleType,
        ),
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _like(t: torch.Tensor) -> torch.Tensor:
    """A new meta tensor with `t`'s metadata, made without recording an op."""
    with torch.utils._python_dispatch._disable_current_modes():
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


def _readers(nodes: list[Node], names: set[str | None]) -> list[Ref]:
    """The tensor values computed from any of `names`: an op with several results
    counts as the `getitem`s that pick them."""
    reads = {n.name for n in nodes if any(r.name in names for r in n.refs())}
    return [
        Ref(n.name)
        for n in nodes
        if isinstance(n.meta, TensorMeta)
        and (n.name in reads or (n.target == "getitem" and n.args[0].name in reads))
    ]


def _fresh_memory(tensors: list[torch.Tensor]) -> dict[int, torch.Tensor]:
    """New meta tensors with the metadata of `tensors` (by id), which share memory
    where the old ones did: tensors that fallback code returns after writing them
    in place stay aliases of each other."""
    out: dict[int, torch.Tensor] = {}
    memory: dict[int, torch.Tensor] = {}
    with torch.utils._python_dispatch._disable_current_modes():
        for t in tensors:
            if memory_of(t) not in memory:
                memory[memory_of(t)] = torch.empty(
                    t.untyped_storage().nbytes(), dtype=torch.uint8, device="meta"
                )
            raw = memory[memory_of(t)].view(t.dtype)
            out[id(t)] = raw.as_strided(t.shape, t.stride(), t.storage_offset())
    return out


def contains_jump(body: cst.CSTNode) -> bool:
    """Whether a loop body has a `break`, `continue` or `return` of its own."""
    found = []

    class _Find(cst.CSTVisitor):
        def visit_Break(self, node) -> None:
            found.append(node)

        visit_Continue = visit_Return = visit_Break

        def visit_FunctionDef(self, node) -> bool:
            return False

        def visit_For(self, node) -> bool:  # a nested loop's break is its own
            return False

        visit_While = visit_For

    body.visit(_Find())
    return bool(found)


_MISSING = object()
# Messages of errors that meta tensors raise where real ones would compute a value
_NEEDS_DATA = ("meta", "data-dependent", "data dependent", "no data")


# What torch raises for bad shapes, dtypes, indices and arguments
TORCH_ERRORS = (RuntimeError, ValueError, IndexError, TypeError)
_HERE = Path(__file__).resolve().parents[1]  # the transpiler package


def _users(error: BaseException) -> BaseException:
    """Mark an error raised here on behalf of the user's code (a failed `assert`,
    a call Python would reject) as the user's."""
    error.transpile_users = True
    return error


def _users_import(name: str):
    """The module `name`, imported; an ImportError is the user's."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        _users(e)
        raise


def _apply(op, *args) -> Any:
    """One Python operation of the user's code (`a + b`, `obj.attr`, `d[k]`), run
    here: what it raises is the user's error (see `_ours`)."""
    try:
        return op(*args)
    except Unsupported:
        raise
    except Exception as e:
        _users(e)
        raise


def _ours(error: BaseException) -> bool:
    """Whether `error` is a limit of this interpreter rather than the user's code:
    raised inside the transpiler package (not by torch through it, nor marked by
    `_users`). Such a statement becomes fallback code, which raises at run time if
    the code really is wrong."""
    if getattr(error, "transpile_users", False) or isinstance(error, TORCH_ERRORS):
        return False
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and Path(frames[-1].filename).resolve().is_relative_to(_HERE)


def needs_data(error: BaseException) -> bool:
    """Whether `error` comes from running on meta tensors (an op with no meta
    implementation, a value that needs data) rather than from the code itself."""
    if getattr(error, "transpile_raised", False):
        return False
    if isinstance(error, NotImplementedError):
        return True
    text = str(error).lower()
    return any(marker in text for marker in _NEEDS_DATA)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _holds(obj: Any, name: str, value: Any) -> bool:
    """Whether `obj` is a module whose tensor `name` is `value` already (the very
    object), so that setting it changes nothing."""
    if not isinstance(obj, nn.Module) or not isinstance(value, torch.Tensor):
        return False
    if type(obj).__setattr__ is not nn.Module.__setattr__:
        return False
    try:
        return getattr(obj, name) is value
    except Exception:
        return False


def _lookup(expr: cst.BaseExpression, frame: Frame) -> Any:
    """The object a name or attribute chain (`self.cache`) denotes, without
    recording anything; _MISSING for any other expression."""
    if isinstance(expr, cst.Name):
        for scope in (frame.locals, *frame.enclosing, frame.globals):
            if expr.value in scope:
                return scope[expr.value]
        return _MISSING
    if isinstance(expr, cst.Attribute):
        base = _lookup(expr.value, frame)
        if base is _MISSING:
            return _MISSING
        try:
            return getattr(base, expr.attr.value)
        except Exception:
            return _MISSING
    return _MISSING


def _has_effect(fn, owner: str) -> bool:
    """Whether calling `fn` (from module `owner`) changes state outside its result
    or reads state of the run (see EFFECT_MODULES); only torch's own functions are
    run at transpile time, so only they are checked."""
    if not owner.startswith("torch") or fn in NO_EFFECT_CONTEXTS:
        return False
    name = getattr(fn, "__name__", "")
    return (
        owner.startswith(EFFECT_MODULES)
        or name in EFFECT_NAMES
        or name.startswith("set_")
        or fn is torch.Generator  # a stateful object of the run
        or isinstance(getattr(fn, "__self__", None), torch.Generator)
    )


def _grad_inside(ctx, grad: bool) -> bool:
    """Whether grad is enabled inside `with ctx:` (one of NO_EFFECT_CONTEXTS),
    where it is `grad` outside."""
    if isinstance(ctx, torch.enable_grad):
        return True
    if isinstance(ctx, torch.inference_mode):
        return grad and not ctx.mode
    if isinstance(ctx, contextlib.nullcontext):
        return grad
    return False  # torch.no_grad


def _owner(fn) -> str:
    """The module a callable comes from ("torch", "numpy", ...); methods of Python
    and torch objects count as their type's module."""
    module = getattr(fn, "__module__", None)
    if module is None and hasattr(fn, "__self__"):
        owner = fn.__self__
        mro = (owner if isinstance(owner, type) else type(owner)).__mro__
        # a built-in method: of the built-in class that defines it (`dict.get`
        # for a subclass's `super().get`), not of the subclass
        name = getattr(fn, "__name__", "")
        module = next(
            (
                c.__module__
                for c in mro
                if name in vars(c) and not isinstance(vars(c)[name], types.FunctionType)
            ),
            type(owner).__module__,
        )
    if module is None:
        module = type(fn).__module__
    return module or "builtins"
