"""The IR's data structures: Var, Eqn, Graph, Prim, and how a prim is bound.

`Prim.bind(*args, **params)` is the single entry point for every primitive op. With numpy
arrays it validates the inputs with the prim's shape rule and runs the numpy reference
implementation; with `Var`s (while a `GraphBuilder` is active) it appends an Eqn instead.
"""
import contextvars
import dataclasses
import functools
import itertools
import os
import re
import sys

from aotgrad.ir import dtypes as dt
from aotgrad.ir.symbolic import SymInt, evaluate as evaluate_size, free_symbols
from aotgrad.ir.tags import KINDS, Tag
from aotgrad.ir.text import format_graph, format_node, type_str

_PKG = __name__.split(".")[0]
_USER_SUBPACKAGES = ("tests", "examples", "benchmarks")  # user code that sits in the checkout
_HELPER_MODULES = ("numpy", "contextlib", "functools")  # frames between the user and aotgrad


class PrimError(ValueError):
    """A primitive got inputs it cannot take; the message names the prim, shapes and user line."""


class Aval:
    """Abstract value: shape and dtype only."""
    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape = shape if type(shape) is tuple else \
            tuple(s if isinstance(s, SymInt) else int(s) for s in shape)
        self.dtype = dtype

    @property
    def ndim(self):
        return len(self.shape)

    def __eq__(self, o):
        return isinstance(o, Aval) and o.shape == self.shape and o.dtype is self.dtype

    def __hash__(self):
        return hash((self.shape, self.dtype))

    def __repr__(self):
        return type_str(self)


_NP_DTYPES = {d.np: d for d in dt.ALL}


def aval_of(x):
    if isinstance(x, Aval):
        return x
    d = _NP_DTYPES.get(x.dtype)
    return Aval(x.shape, d if d is not None else dt.from_numpy(x.dtype))


class Var(Aval):
    """An SSA value of a Graph: a name, a shape and a dtype."""
    __slots__ = ("name",)

    def __init__(self, name, shape, dtype):
        super().__init__(shape, dtype)
        self.name = name

    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __repr__(self):
        return self.name


class Provenance:
    """Where a node came from: the user's file:line, source text, the user-level op, fw or bw."""
    __slots__ = ("file", "line", "source", "op", "phase")

    def __init__(self, file=None, line=None, source=None, op=None, phase="fw"):
        self.file, self.line, self.source, self.op, self.phase = file, line, source, op, phase

    def with_phase(self, phase):
        return Provenance(self.file, self.line, self.source, self.op, phase)

    def where(self):
        return f"{os.path.basename(self.file)}:{self.line}" if self.file else "<unknown>"

    def __repr__(self):
        tag = " bw" if self.phase == "bw" else ""
        return f"{self.where()} {self.op or ''}{tag}".strip()


def is_aotgrad_module(name):
    """Code of module `name` is aotgrad's own, not the user's: the package and its
    subpackages, except the tests, examples and benchmarks that sit in the checkout."""
    if not name or name.split(".")[0] not in (_PKG, "aotgrad"):
        return False
    parts = name.split(".")
    return len(parts) < 2 or parts[1] not in _USER_SUBPACKAGES


def is_internal_frame(frame):
    """A frame of aotgrad (by its module's name, wherever the files lie), or of the helpers
    between the user's code and aotgrad's (numpy, contextlib, functools, frozen imports)."""
    return _internal_code(frame.f_globals.get("__name__"), frame.f_code.co_filename)


@functools.lru_cache(maxsize=4096)
def _internal_code(name, filename):
    # (looked up for every frame between each traced op and the user's line: a trace walks
    # tens of thousands of frames of a few hundred functions)
    return is_aotgrad_module(name) or (name or "").split(".")[0] in _HELPER_MODULES or \
        filename.startswith("<frozen")


def user_frame(depth=1):
    """The innermost stack frame outside the aotgrad package (the user's code), or None."""
    f = sys._getframe(depth)
    while f is not None and is_internal_frame(f):
        f = f.f_back
    return f


def user_location():
    """(file, line, source text) of the user's call site."""
    f = user_frame(2)
    if f is None:
        return None, None, None
    import linecache
    line = f.f_lineno
    return f.f_code.co_filename, line, linecache.getline(f.f_code.co_filename, line).strip()


# The user-level op currently executing (outermost wins) and the phase, set by the op layer
# and the autograd engine; read when recording provenance and formatting errors.
current_op = contextvars.ContextVar("aotgrad_current_op", default=None)
current_provenance = contextvars.ContextVar("aotgrad_current_provenance", default=None)


def make_provenance():
    prov = current_provenance.get()
    if prov is not None:  # inside a backward rule: the forward op's line, tagged bw
        return prov
    file, line, src = user_location()
    return Provenance(file, line, src, current_op.get())


_LOCATION = re.compile(r" \(at [^\s:]+:\d+: `")


def names_location(msg):
    """Does error message `msg` name a user's line already (as `format_location` writes it)?
    (PyTorch's own wording has "(at least ...": not a location.)"""
    return _LOCATION.search(msg) is not None


def format_location():
    file, line, src = user_location()
    if file is None:
        return ""
    return f" (at {os.path.basename(file)}:{line}: `{src}`)"


def located_error(err, node):
    """An error raised while a compiled program ran `node`, re-made (same type) to name the
    user-level op and the user's source line from the node's provenance, as errors raised
    eagerly and while tracing do. err itself when it names a line already or cannot be
    re-made."""
    prov = node.provenance
    msg = err.args[0] if len(err.args) == 1 and isinstance(err.args[0], str) else None
    if prov is None or msg is None or names_location(msg):
        return err
    where = f" (at {os.path.basename(prov.file)}:{prov.line}: `{prov.source}`)" \
        if prov.file else ""
    phase = " (backward)" if prov.phase == "bw" else ""
    op = prov.op or "prims." + node.prim.name
    # a message that starts with the op's name already (PyTorch's "embedding(): ...") is not
    # prefixed again, as eager leaves it
    prefix = "" if not phase and msg.startswith((f"{op}(): ", f"{op}:")) else f"{op}{phase}: "
    try:
        new = type(err)(f"{prefix}{msg}{where}")
    except Exception:   # an exception type that takes other arguments: leave it as it is
        return err
    new.__traceback__ = err.__traceback__
    return new


# Value types that a function transform interprets (vmap's batched values, ir/batching.py):
# type -> handler(prim, args, params), called for a bind that takes such a value.
INTERPRETED = {}
# Prims a function transform watches whatever their inputs (vmap's random draws): prim ->
# handler(prim, args, params), whose result is the bind's, or None to bind as usual.
WATCHED_PRIMS = {}


class Prim:
    """A primitive op: a shape/dtype rule, a numpy reference implementation and tags (its
    kind and the facts other modules ask about it: see ir/tags.py).

    >>> from aotgrad.ir import prims
    >>> prims.add.bind(np.ones(2, np.float32), np.ones(2, np.float32))
    array([2., 2.], dtype=float32)
    """

    def __init__(self, name, shape_rule, impl, tags=(), multiple_results=False):
        self.name, self.shape_rule, self.impl = name, shape_rule, impl
        self.tags = frozenset(Tag(t) for t in tags)
        kinds = self.tags & KINDS
        if len(kinds) != 1:
            raise ValueError(f"prims.{name} needs exactly one kind tag of "
                             f"{sorted(KINDS)}, got {sorted(kinds)}")
        self.kind, = kinds
        self.multiple_results = multiple_results

    def __repr__(self):
        return f"prims.{self.name}"

    def abstract_eval(self, *avals, **params):
        """Output aval(s) for input avals; raises PrimError naming the prim, shapes and line."""
        try:
            return self.shape_rule(*avals, **params)
        except PrimError as e:
            # with symbolic sizes, the message names the sizes of the call being traced (as
            # eager's would): the rule again on their values, where it fails alike
            err, avals = _with_sizes_of_the_call(self, avals, params, e)
            shapes = ", ".join(type_str(a) if isinstance(a, Aval) else repr(a) for a in avals)
            raise PrimError(f"prims.{self.name}({shapes}): {err}{format_location()}") from None

    def bind(self, *args, **params):
        if INTERPRETED:
            for a in args:
                handler = INTERPRETED.get(type(a))
                if handler is not None:
                    return handler(self, args, params)
            watch = WATCHED_PRIMS.get(self)
            if watch is not None:
                out = watch(self, args, params)
                if out is not None:
                    return out
        builder = _builder.get()
        if builder is not None and (not args or any(isinstance(a, Var) for a in args)):
            return builder.emit(self, args, params)
        self.abstract_eval(*[aval_of(a) for a in args], **params)
        return self.impl(*args, **params)


def _with_sizes_of_the_call(prim, avals, params, err):
    """(error, avals) to report for `err`, raised by prim's shape rule on `avals`: where
    sizes are symbolic, the rule's error on their values in the traced call (its hints)
    and those avals, when the rule fails there too; else `err` and `avals` as they are."""
    if not any(isinstance(a, Aval) and any(isinstance(d, SymInt) for d in a.shape)
               for a in avals) and not _has_symbols(params):
        return err, avals
    concrete = [Aval(tuple(evaluate_size(d, None) for d in a.shape), a.dtype)
                if isinstance(a, Aval) else a for a in avals]
    try:
        prim.shape_rule(*concrete, **evaluate_params(params, None))
    except PrimError as e:
        return e, concrete
    return err, avals


def _has_symbols(p):
    if isinstance(p, SymInt):
        return True
    if type(p) in (tuple, list):
        return any(_has_symbols(x) for x in p)
    if isinstance(p, dict):
        return any(_has_symbols(x) for x in p.values())
    if isinstance(p, slice):
        return _has_symbols((p.start, p.stop, p.step))
    return False


# Every prim, by name (the printer, the tensor-level prims and the tests list them from here).
PRIMS = {}


def register(name, rule, impl, tags=(), multiple_results=False):
    """Make the prim `name` and enter it in PRIMS; the caller binds it to a module-level name
    of the same spelling (`exp = register("exp", ...)`), so each prim has one definition."""
    if name in PRIMS:
        raise ValueError(f"prims.{name} is defined twice")
    p = Prim(name, rule, impl, tags, multiple_results)
    PRIMS[name] = p
    return p


def check(cond, msg):
    if not cond:
        raise PrimError(msg)


class Eqn:
    """One primitive application in a Graph (an equation of the SSA program, as in a jaxpr;
    autograd's graph nodes are `autograd.graph.Node`)."""
    __slots__ = ("prim", "inputs", "outputs", "params", "provenance")

    def __init__(self, prim, inputs, outputs, params, provenance=None):
        self.prim, self.inputs, self.outputs = prim, list(inputs), list(outputs)
        self.params, self.provenance = dict(params), provenance

    def __repr__(self):
        return format_node(self)


# The IR's former name for Eqn, kept so that code written against it keeps working.
Node = Eqn


def make_node(prim, inputs, params, provenance, names):
    """An Eqn applying `prim`, its output Vars typed by the prim's shape rule (named `names`,
    one per output): how a pass builds a node that computes a new value."""
    out = prim.abstract_eval(*inputs, **params)
    outs = out if prim.multiple_results else (out,)
    return Eqn(prim, inputs, [Var(nm, a.shape, a.dtype) for nm, a in zip(names, outs)],
               params, provenance)


class Graph:
    """A function in SSA form: typed inputs, Nodes in topological order, outputs.

    `str(graph)` is valid Python runnable with the numpy reference prims (see ir.printer).
    """

    def __init__(self, inputs=(), nodes=(), outputs=(), name="graph"):
        self.inputs, self.nodes, self.outputs = list(inputs), list(nodes), list(outputs)
        self.name = name

    def __str__(self):
        return format_graph(self)

    def producers(self):
        return {v: n for n in self.nodes for v in n.outputs}

    def users(self):
        out = {}
        for n in self.nodes:
            for v in n.inputs:
                out.setdefault(v, []).append(n)
        return out

    def to_networkx(self):
        """A DiGraph view: one vertex per Var and per Node (edges follow data flow)."""
        import networkx as nx
        g = nx.DiGraph()
        for v in self.inputs:
            g.add_node(v, kind="input")
        for n in self.nodes:
            g.add_node(n, kind="node")
            for v in n.inputs:
                g.add_edge(v, n)
            for v in n.outputs:
                g.add_node(v, kind="var")
                g.add_edge(n, v)
        return g

    def run(self, *args):
        """Evaluate with the numpy reference implementations."""
        return evaluate(self, args)


def evaluate_params(params, values):
    """A node's params with each symbolic size evaluated at `values` (symbol -> int)."""
    def ev(p):
        if isinstance(p, SymInt):
            return evaluate_size(p, values)
        if type(p) in (tuple, list):
            return type(p)(ev(x) for x in p)
        if isinstance(p, slice):
            return slice(ev(p.start), ev(p.stop), ev(p.step))
        if dataclasses.is_dataclass(p) and not isinstance(p, type):   # a ValueCheck's bound
            sized = {f.name: ev(getattr(p, f.name)) for f in dataclasses.fields(p)
                     if _has_symbols(getattr(p, f.name))}
            return dataclasses.replace(p, **sized) if sized else p
        return p
    return {k: ev(v) for k, v in params.items()}


def evaluate(graph, args, values=None, node_params=None, after_node=None):
    """Run `graph` with the reference impls; `values`: the symbol values of a graph with
    symbolic sizes (its params are evaluated with them), or `node_params`: each node's
    params so evaluated already. `after_node(i, node, env)`: called once node i's outputs
    are in `env` (value of each Var so far)."""
    env = dict(zip(graph.inputs, args))
    for i, n in enumerate(graph.nodes):
        try:
            params = n.params if values is None else evaluate_params(n.params, values)
            if node_params is not None:
                params = node_params[i]
            outs = n.prim.impl(*[env[v] for v in n.inputs], **params)
        except Exception as e:
            located = located_error(e, n)
            if located is e:
                raise
            raise located from None
        if not n.prim.multiple_results:
            outs = (outs,)
        env.update(zip(n.outputs, outs))
        if after_node is not None:
            after_node(i, n, env)
    return [env[v] for v in graph.outputs]


_counter = itertools.count()


class GraphBuilder:
    """Records binds on Vars into a Graph. Active inside `with builder:`.

    Non-Var array arguments are handed to `lift(array) -> Var`, which the tracer overrides
    to turn closed-over values into graph inputs; by default it raises.
    """

    def __init__(self, name="graph"):
        self.graph = Graph(name=name)
        self._names = itertools.count()
        self._token = None

    def new_var(self, aval, prefix="t"):
        return Var(f"{prefix}{next(self._names)}", aval.shape, aval.dtype)

    def add_input(self, aval, name=None):
        v = Var(name, aval.shape, aval.dtype) if name else self.new_var(aval, "a")
        self.graph.inputs.append(v)
        return v

    def lift(self, value):
        raise PrimError(f"a concrete array of shape {getattr(value, 'shape', '?')} reached a "
                        f"traced prim; it must be an input of the graph")

    def track(self, obj):
        """Called for every traced tensor object created (the tracer finds escapes)."""

    def lift_object(self, obj):
        """A concrete tensor-like object (with `_value`) used inside the trace."""
        return self.lift(obj._value)

    def emit(self, prim, args, params):
        args = [a if isinstance(a, Var) else self.lift(a) for a in args]
        out = prim.abstract_eval(*args, **params)
        outs = out if prim.multiple_results else (out,)
        out_vars = [self.new_var(a) for a in outs]
        self.graph.nodes.append(Eqn(prim, args, out_vars, params, make_provenance()))
        return out_vars if prim.multiple_results else out_vars[0]

    def __enter__(self):
        self._token = _builder.set(self)
        return self

    def __exit__(self, *exc):
        _builder.reset(self._token)


_builder = contextvars.ContextVar("aotgrad_graph_builder", default=None)


def current_builder():
    return _builder.get()


class no_builder:
    """Inside, no graph records: ops run on concrete values (the active builder after)."""

    def __enter__(self):
        self._token = _builder.set(None)
        return self

    def __exit__(self, *exc):
        _builder.reset(self._token)


Prim.__call__ = Prim.bind  # printed graphs call prims like functions


def first_nan_node(graph, args):
    """Replay `graph` with the numpy reference prims; return the first Node whose output has a
    NaN although its inputs have none (None if no node produces one)."""
    import numpy as np
    env = dict(zip(graph.inputs, args))
    for n in graph.nodes:
        ins = [env[v] for v in n.inputs]
        outs = n.prim.impl(*ins, **n.params)
        if not n.prim.multiple_results:
            outs = (outs,)
        env.update(zip(n.outputs, outs))

        def has_nan(a):
            a = np.asarray(a)
            return a.dtype.kind == "f" and bool(np.isnan(a).any())
        if any(has_nan(o) for o in outs) and not any(has_nan(i) for i in ins):
            return n
    return None


def _param_symbols(p):
    if isinstance(p, SymInt):
        return p.free_symbols
    if isinstance(p, (tuple, list)):
        out = set()
        for x in p:
            out |= _param_symbols(x)
        return out
    if isinstance(p, slice):
        return _param_symbols((p.start, p.stop, p.step))
    return set()


def graph_symbols(graph):
    """The sorted names of the symbols in a graph's sizes (inputs, outputs, every value and
    param): the order of the values tuple its compiled callable takes."""
    names = set()
    for v in graph.inputs:
        for d in v.shape:
            names |= free_symbols(d)
    for n in graph.nodes:
        for v in n.outputs:
            for d in v.shape:
                names |= free_symbols(d)
        for p in n.params.values():
            names |= _param_symbols(p)
    return tuple(sorted(names))
