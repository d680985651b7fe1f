"""The autograd engine: graph nodes (`grad_fn`), AccumulateGrad, saved tensors, and the
topologically ordered backward pass shared by `Tensor.backward` and `autograd.grad`.

A node's backward is written with tensor ops, so running it under grad mode
(`create_graph=True`) records a differentiable graph of the backward itself, and running it
on traced tensors records the backward into the IR.
"""
import heapq
import itertools
import threading
import types
import warnings
import weakref

import numpy as np

from aotgrad.ir.core import Aval, Var, current_provenance
from aotgrad.ir.core import current_builder as _current_builder
from aotgrad.ir.core import make_provenance as _make_provenance
from aotgrad.runtime import grad_mode, profiling
from aotgrad.runtime.grad_mode import state as _mode

_seq = itertools.count()
next_sequence_nr = _seq.__next__  # a node's sequence number (later nodes run first)
Tensor = None  # runtime/tensor.py sets this (it imports this module first)
_EMPTY = types.MappingProxyType({})


class VersionCounter:
    """Shared by a tensor, its views and detached aliases; bumped by every in-place op.
    (No __init__: `v` reads the class default until the first bump, and making one, which
    every new tensor does, costs a third less.)

    `t._version_counter` is this shared counter; `t._version` is its current value, an int
    as in PyTorch. (`int(counter)` and `counter == 2` read the current value too.)"""
    v = 0

    def __int__(self):
        return self.v

    __index__ = __int__

    def __eq__(self, other):
        if isinstance(other, VersionCounter):
            return self is other
        return self.v == other

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = object.__hash__

    def __lt__(self, other):
        return self.v < int(other)

    def __le__(self, other):
        return self.v <= int(other)

    def __gt__(self, other):
        return self.v > int(other)

    def __ge__(self, other):
        return self.v >= int(other)

    def __add__(self, other):
        return self.v + int(other)

    __radd__ = __add__

    def __sub__(self, other):
        return self.v - int(other)

    def __rsub__(self, other):
        return int(other) - self.v

    def __repr__(self):
        return repr(self.v)


_LEGACY_TYPE = {"float32": "FloatTensor", "float64": "DoubleTensor", "int64": "LongTensor",
                "int32": "IntTensor", "bool": "BoolTensor"}


FREED_MESSAGE = (
    "Trying to backward through the graph a second time (or directly access saved tensors "
    "after they have already been freed). Saved intermediate values of the graph are freed "
    "when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to "
    "backward through the graph a second time or if you need to access saved tensors after "
    "calling backward.")


INFERENCE_SAVE_MESSAGE = (
    "Inference tensors cannot be saved for backward. Please do not use Tensors created in "
    "inference mode in computation tracked by autograd. To work around this, you can make a "
    "clone to get a normal tensor and use it in autograd, or use `aotgrad.no_grad()` instead "
    "of `aotgrad.inference_mode()`.")


class SavedTensorModifiedError(RuntimeError):
    """A tensor saved for the backward was modified in place after it was saved."""


class SavedTensor:
    """A tensor saved for backward: its value, its version at save time, and how to rebuild it.
    Outputs of the saving node are stored without their grad_fn to avoid a reference cycle."""
    __slots__ = ("value", "counter", "version", "grad_fn", "output_nr", "requires_grad",
                 "is_output", "leaf", "op_name", "hooks", "ref", "sparse")

    def __init__(self, t, is_output=False, op_name=None):
        if t._inference and not _mode.inference:
            raise RuntimeError(INFERENCE_SAVE_MESSAGE)
        self.value, self.counter = t._value, t._version_counter
        self.version = self.counter.v
        self.requires_grad, self.is_output, self.op_name = t.requires_grad, is_output, op_name
        self.grad_fn = None if is_output else t.grad_fn
        self.output_nr = t._output_nr
        # an output is saved while its node is being made (grad_fn not yet set): never a leaf
        self.leaf = t if (not is_output and t.grad_fn is None and t.requires_grad) else None
        self.hooks = None
        self.ref = weakref.ref(t)  # to name its current grad_fn if it is modified in place
        self.sparse = t.__dict__.get("_sparse")  # a sparse COO tensor's indices (sparse_ops)
        if isinstance(t._value, Var):  # traced: a reshape of it may be a view eagerly
            t.__dict__["_traced_saved"] = True
        if saved_hooks.stack:  # autograd.graph.saved_tensors_hooks: keep what pack returns
            saved_hooks.stack[-1]._pack_saved(self, t)  # sets .hooks and .value
        elif saved_hooks.copy_saved and isinstance(self.value, np.ndarray):
            self._keep_copy()

    def _keep_copy(self):
        """autograd.graph.allow_mutation_on_saved_tensors: keep the value as it is now, so that
        later in-place changes of the tensor do not reach the backward (a saved leaf becomes a
        copy whose gradient still reaches the leaf's .grad)."""
        self.value = np.array(self.value, copy=True)
        self.counter, self.version = VersionCounter(), 0
        if self.leaf is not None:
            self.grad_fn = self.leaf._grad_accumulator()
            self.leaf = None

    def register_hooks(self, pack_hook, unpack_hook):
        """`grad_fn._raw_saved_<name>.register_hooks(pack, unpack)`: pack the saved value now
        and unpack it whenever the backward reads it (as a `saved_tensors_hooks` pair would
        have done for this one saved tensor)."""
        if not callable(pack_hook) or not callable(unpack_hook):
            raise TypeError("Expected pack_hook and unpack_hook to be callable")
        if self.hooks is not None:
            raise RuntimeError("Calling register_hooks on a saved tensor whose hooks have "
                               "already been set. Hint: only one pair of hooks is allowed at a "
                               "time.")
        if self.value is None:
            raise RuntimeError(FREED_MESSAGE)
        from aotgrad.runtime.saved_hooks import SavedTensorHooks
        t = self.leaf if self.leaf is not None else Tensor._make(self.value, False)
        SavedTensorHooks(pack_hook, unpack_hook)._pack_saved(self, t)

    def unpack(self, node):
        if self.value is None:
            raise RuntimeError(FREED_MESSAGE)
        if self.hooks is not None:
            return self.hooks[0]._unpack_saved(self, node)
        if self.counter.v != self.version:
            self._raise_modified(node)
        if self.leaf is not None:
            return self.leaf
        t = Tensor._make(self.value, self.requires_grad)
        t.grad_fn = node if self.is_output else self.grad_fn
        if type(t.grad_fn) is AccumulateGrad:  # a copied leaf (allow_mutation_on_saved_tensors)
            acc = t.grad_fn
            t.grad_fn, t._accumulator = None, (lambda: acc)
        t._output_nr = self.output_nr
        t._version_counter = self.counter
        if self.sparse is not None:
            t.__dict__["_sparse"] = self.sparse
        return t

    def _raise_modified(self, node):
        shape = "x".join(map(str, getattr(self.value, "shape", ())))
        dtype = self.value.dtype
        dtype = getattr(dtype, "name", None) or str(dtype)
        t = self.ref()
        # an output saved by its own op is named by that op (PyTorch keeps no link to the
        # tensor); a saved input by the tensor's current grad_fn (the in-place op's)
        fn = node if self.is_output else (t.grad_fn if t is not None else self.grad_fn)
        which = ""
        if fn is not None:  # PyTorch names the forward op: "output 0 of Mul"
            name = fn.name()
            base = name.rsplit("Backward", 1)[0] if "Backward" in name else name
            which = f", which is output {self.output_nr} of {base or name},"
        raise SavedTensorModifiedError(
            f"one of the variables needed for gradient computation has been modified by an "
            f"inplace operation: [aotgrad.{_LEGACY_TYPE.get(dtype, dtype)} [{shape}]]{which} "
            f"is at version {self.counter.v}; expected version {self.version} instead. Hint: "
            f"enable anomaly detection to find the operation that failed to compute its "
            f"gradient, with aotgrad.autograd.set_detect_anomaly(True, check_nan=False).")

    def release(self):
        self.value = None
        self.leaf = None
        self.hooks = None


class _SavedTensorsHooks(threading.local):
    """The active `autograd.graph.saved_tensors_hooks` contexts (innermost last; they run
    the hooks) and the message `disable_saved_tensors_hooks` set (None: enabled), per thread."""

    def __init__(self):
        self.stack = []
        self.disabled_message = None
        self.copy_saved = 0  # depth of autograd.graph.allow_mutation_on_saved_tensors


saved_hooks = _SavedTensorsHooks()


class Node:
    """A node of the backward graph (a `grad_fn`). Calling it maps output grads to input grads.

    >>> x = aotgrad.ones(3, requires_grad=True)
    >>> y = (x * 2).sum(); y.grad_fn.name()
    'SumBackward0'
    """
    _name = "Node"
    # hook containers are created on first registration (most nodes never get one)
    _pre_hooks = _hooks = ()
    _tensor_pre_hooks = _retain_grad = _EMPTY  # output_nr -> [hook(grad)] / weakref(tensor)
    _stack = _provenance = None
    _in_composite = False  # one of the prims' nodes a composite node (runtime.composite) runs
    # a built-in node that receives no gradient at all gives none (PyTorch's derivative
    # formulas skip an undefined gradient); custom Functions and compiled backwards run on
    # materialized zeros instead
    _none_in_none_out = True
    # optional: fast_backward(t, retain_graph) -> bool runs `t.backward()` (implicit gradient,
    # no create_graph, no inputs) when nothing needs the general engine; False: nothing done
    _fast_backward = None
    # a node none of whose outputs got a gradient gives its inputs none (it does not run on
    # zeros), as PyTorch's built-in nodes; custom Functions run on zeros (BackwardCFunction)
    runs_without_grads = False

    def __init__(self, next_functions, in_avals, out_avals):
        self.next_functions = tuple(next_functions)
        self._in_avals = in_avals        # shapes/dtypes of the forward inputs (grad outputs)
        self._out_avals = out_avals      # shapes/dtypes of the forward outputs (grads in)
        self._note_origin()

    def _note_origin(self):
        """Sequence number, and where the node was made: the forward stack in anomaly mode,
        the user's source line while tracing."""
        self._seq = next(_seq)
        if _mode.anomaly:
            self._stack = grad_mode.forward_stack()
        if _current_builder() is not None:
            self._provenance = _make_provenance()

    @property
    def metadata(self):
        """A dict for the user's annotations (like PyTorch's Node.metadata)."""
        d = self.__dict__.get("_metadata")
        if d is None:
            d = self.__dict__["_metadata"] = {}
        return d

    def _tensor_hooks(self, output_nr):
        """The list of Tensor.register_hook hooks for one output (created on demand)."""
        if self._tensor_pre_hooks is _EMPTY:
            self._tensor_pre_hooks = {}
        return self._tensor_pre_hooks.setdefault(output_nr, [])

    def _drop_tensor_hooks(self, output_nr):
        """Forget the Tensor.register_hook hooks of one output."""
        if output_nr in self._tensor_pre_hooks:
            del self._tensor_pre_hooks[output_nr]

    def _set_retain_grad(self, output_nr, ref):
        if self._retain_grad is _EMPTY:
            self._retain_grad = {}
        self._retain_grad[output_nr] = ref

    def name(self):
        return self._name

    @property
    def _input_metadata(self):
        """Shape and dtype of each gradient the node takes (its forward outputs'), as
        PyTorch's `grad_fn._input_metadata`."""
        return [None if a is None else
                types.SimpleNamespace(shape=tuple(a.shape), dtype=a.dtype,
                                      is_nested_tensor=False, is_cpp_nested_tensor=False)
                for a in self._out_avals]

    def _sequence_nr(self):
        """The order the node was made in (later nodes run first), as PyTorch's."""
        return self._seq

    def __repr__(self):
        return f"<{self.name()} object at {hex(id(self))}>"

    def _backward(self, grads):
        raise NotImplementedError

    def _release(self):
        pass

    def __call__(self, *grads):
        """Run the node's backward by hand, as `grad_fn(grad)` in PyTorch: one gradient per
        output of the forward (a gradient broadcastable to the output's shape is expanded;
        when every gradient is None, so is every result)."""
        avals = self._out_avals
        if len(grads) != len(avals):
            raise TypeError(f"expected {len(avals)} arguments, got {len(grads)} instead")
        if all(g is None for g in grads):
            outs = (None,) * len(self.next_functions)
        else:
            grads = [g.expand(a.shape) if g is not None and a is not None and
                     tuple(g.shape) != tuple(a.shape) else g for g, a in zip(grads, avals)]
            outs = tuple(self._backward(self._materialize(grads)))
        return outs[0] if len(outs) == 1 else outs  # (one gradient: the tensor itself)

    def _materialize(self, grads):
        for g in grads:  # (not `None in grads`: that would call Tensor.__eq__)
            if g is None:
                break
        else:
            return grads
        from aotgrad.runtime import tprims
        return [g if g is not None else tprims.zeros(a.shape, a.dtype)
                for g, a in zip(grads, self._out_avals)]

    def register_hook(self, fn):
        """fn(grad_inputs, grad_outputs) after the node runs; may return new grad_inputs."""
        if self._hooks == ():
            self._hooks = []
        self._hooks.append(fn)
        return RemovableHandle(self._hooks, fn)

    def register_prehook(self, fn):
        """fn(grad_outputs) before the node runs; may return new grad_outputs."""
        if self._pre_hooks == ():
            self._pre_hooks = []
        self._pre_hooks.append(fn)
        return RemovableHandle(self._pre_hooks, fn)


class RemovableHandle:
    """Returned by every register_*hook; `handle.remove()` unregisters."""

    def __init__(self, hooks, fn):
        self._hooks, self._fn = hooks, fn

    def remove(self):
        if self._fn in self._hooks:
            self._hooks.remove(self._fn)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


class AccumulateGrad(Node):
    """The sink node of a leaf tensor: adds the incoming gradient to `variable.grad`."""
    _name = "AccumulateGrad"
    next_functions = ()
    _in_avals = ()

    def __init__(self, variable):  # made every step: no edges, avals derived on demand
        self.variable = variable
        self._note_origin()

    @property
    def _out_avals(self):
        return [Aval(self.variable._value.shape, self.variable.dtype)]

    def _backward(self, grads):
        accumulate_grad(self.variable, grads[0], _mode.grad_enabled)
        return []


def accumulate_grad(var, g, create_graph):
    if g is None:
        return
    if "_grad_dtype" in var.__dict__:  # Tensor.grad_dtype was set: cast to it (None: keep)
        grad_dtype = var.__dict__["_grad_dtype"]
        if grad_dtype is not None and g.dtype is not grad_dtype:
            g = g.to(grad_dtype)
    note_grad_write(var)
    if create_graph:
        var._grad = g if var._grad is None else var._grad + g
    elif var._grad is None:
        if g.__dict__.pop("_fresh", False):  # a buffer nobody else holds: take it as is
            var._grad = g
            return _post_accumulate(var)
        value = g._value
        if isinstance(value, np.ndarray):
            value = np.array(value, copy=True, order="C")
        var._grad = Tensor._make(value, False)
    elif isinstance(var._grad._value, np.ndarray) and isinstance(g._value, np.ndarray) and \
            var._grad._value.flags.writeable and var._grad.grad_fn is None:
        np.add(var._grad._value, g._value, out=var._grad._value)
        var._grad._version_counter.v += 1
    else:
        var._grad = Tensor._make((var._grad + g.detach())._value, False)
    _post_accumulate(var)


def plain_leaves(leaves):
    """True when gradients for these leaf tensors may be written into their .grad directly:
    no tensor hooks, no post-accumulate hooks, no hooks on a live AccumulateGrad node, and no
    tensor twice (its gradients are summed first, as the general engine does)."""
    for v in leaves:
        if v._hooks or v._post_acc_hooks or "_grad_dtype" in v.__dict__:
            return False
        ref = v._accumulator
        if ref is not None:
            node = ref()
            if node is not None and (node._pre_hooks or node._hooks):
                return False
    return len(leaves) < 2 or len(set(map(id, leaves))) == len(leaves)


def accumulate_array(var, value, owned):
    """accumulate_grad(var, g, create_graph=False) for a gradient given as a numpy array of
    var's shape and dtype, outside tracing, with no hooks to run (see plain_leaves). `owned`:
    the array is referenced by nothing else, so it may become .grad without a copy."""
    if var._grad is None:
        var._grad = Tensor._make(value if owned else np.array(value, copy=True, order="C"))
        return
    prev, _mode.grad_enabled = _mode.grad_enabled, False
    try:
        accumulate_grad(var, Tensor._make(value), False)
    finally:
        _mode.grad_enabled = prev


def _post_accumulate(var):
    for hook in var._post_acc_hooks:
        if hook(var) is not None:
            raise RuntimeError("Tensor post accumulate grad hooks should return None.")


def fresh(t):
    """Mark a tensor whose array was just allocated for it and is referenced nowhere else (a
    compiled backward's output): AccumulateGrad may keep it as `.grad` without a copy."""
    t.__dict__["_fresh"] = True
    return t


class GradientEdge(tuple):
    """(node, output_nr): where a gradient enters the backward graph. `autograd.grad` and
    `backward` accept one wherever they take a tensor (see autograd.graph.get_gradient_edge)."""
    __slots__ = ()

    def __new__(cls, node, output_nr):
        return tuple.__new__(cls, (node, output_nr))

    @property
    def node(self):
        return self[0]

    @property
    def output_nr(self):
        return self[1]

    def __repr__(self):
        return f"GradientEdge(node={self[0]!r}, output_nr={self[1]})"


class GraphTask:
    """One running backward pass: `deps`, the nodes it will reach (which hooks ask about),
    and `deferred`, nodes whose saved tensors are freed when it ends rather than when they
    ran (the prims' nodes inside a composite node, which may run again through it)."""
    __slots__ = ("deps", "deferred", "only_inputs", "__weakref__")

    def __init__(self, deps, only_inputs):
        self.deps = deps
        self.deferred = []
        self.only_inputs = only_inputs  # autograd.grad or backward(inputs=...)


def release_after_pass(nodes):
    """Free the saved tensors of `nodes` when the running backward pass ends (now if none
    runs)."""
    if graph_tasks.stack:
        graph_tasks.stack[-1].deferred.extend(nodes)
    else:
        for n in nodes:
            n._release()


class _GraphTasks(threading.local):
    """The backward passes running in this thread (innermost last), which
    `autograd.graph.register_multi_grad_hook` asks about."""

    def __init__(self):
        self.stack = []


graph_tasks = _GraphTasks()


def _node_of(t):
    """(node, output_nr) a gradient for tensor t (or GradientEdge t) flows into."""
    if type(t) is GradientEdge:
        return t
    if t.grad_fn is not None:
        return t.grad_fn, t._output_nr
    if t.requires_grad:
        return t._grad_accumulator(), 0
    return None, 0


def _check_grad(node, i, g, aval, dest=None):
    """g, checked against the shape and dtype of input i of the forward (cast to its dtype,
    except into the .grad of a leaf whose grad_dtype is None: that keeps any dtype)."""
    if g is None:
        return None
    v = g._value
    if v.shape == aval.shape and (v.dtype is aval.dtype or v.dtype == aval.dtype.np):
        return g  # the common case, checked without building Size/DType objects
    if tuple(g.shape) != aval.shape:
        if int(np.prod(g.shape)) == int(np.prod(aval.shape)) or (len(g.shape) <= len(aval.shape)):
            try:  # a broadcastable grad (e.g. from a user hook) is reduced like PyTorch does
                from aotgrad.runtime.ops import sum_to_shape
                if np.broadcast_shapes(tuple(g.shape), aval.shape) == tuple(g.shape):
                    return sum_to_shape(g, aval.shape)
            except ValueError:
                pass
        raise RuntimeError(f"Function {node.name()} returned an invalid gradient at index {i} - "
                           f"got {list(g.shape)} but expected shape compatible with "
                           f"{list(aval.shape)}")
    if g.dtype is not aval.dtype and aval.dtype.is_floating_point and not (
            type(dest) is AccumulateGrad and
            dest.variable.__dict__.get("_grad_dtype", aval.dtype) is None):
        g = g.to(aval.dtype)
    return g


def _run_node(node, grads, create_graph):
    """Run one node with its hooks, anomaly checks and profiling. (The hooks registered when
    the node starts run: one a hook removes or adds meanwhile does not change that, as in
    PyTorch.)"""
    for hook in tuple(node._pre_hooks):
        r = hook(tuple(grads))
        if r is not None:
            grads = _checked_node_hook_result(hook, grads, r)
    skip = not node.runs_without_grads and all(g is None for g in grads)
    if isinstance(node, AccumulateGrad) or skip:
        grads_in = grads
    elif node._none_in_none_out and _all_none(grads):
        outs = [None] * len(node.next_functions)
        for hook in node._hooks:
            r = hook(tuple(outs), tuple(grads))
            if r is not None:
                outs = _checked_node_hook_result(hook, outs, r)
        return outs
    else:
        grads_in = node._materialize(grads) if getattr(node, "materialize_grads", True) else grads
    prof = profiling.active()
    token = current_provenance.set(node._provenance.with_phase("bw")) \
        if node._provenance is not None else None
    try:
        if skip:
            outs = [None] * len(node.next_functions)
        elif prof:
            with profiling.record(node.name(), kind="backward"):
                outs = node._backward(grads_in)
        else:
            outs = node._backward(grads_in)
    except Exception as e:
        if _mode.anomaly and node._stack is not None:
            _report_anomaly(node, e)
        raise
    finally:
        if token is not None:
            current_provenance.reset(token)
    outs = list(outs)
    if not isinstance(node, AccumulateGrad):
        if len(outs) != len(node.next_functions):
            raise RuntimeError(f"Function {node.name()} returned an incorrect number of "
                               f"gradients (expected {len(node.next_functions)}, got {len(outs)})")
        outs = [_check_grad(node, i, g, a, nf[0]) if nf[0] is not None else None
                for i, (g, a, nf) in enumerate(zip(outs, node._in_avals, node.next_functions))]
        if _mode.anomaly and _mode.anomaly_check_nan:
            for i, g in enumerate(outs):
                if g is not None and isinstance(g._value, np.ndarray) and np.isnan(g._value).any():
                    err = RuntimeError(f"Function '{node.name()}' returned nan values in its "
                                       f"{i}th output.")
                    if node._stack is not None:
                        _report_anomaly(node, err)
                    raise err
    for hook in tuple(node._hooks):
        r = hook(tuple(outs), tuple(grads))
        if r is not None:
            outs = _checked_node_hook_result(hook, outs, r)
    return outs


def _all_none(grads):
    for g in grads:  # (not `None in grads` nor all(): that calls Tensor.__eq__ / costs more)
        if g is not None:
            return False
    return True


def _checked_node_hook_result(hook, grads, r):
    """A Node hook's replacement grads: as many as before, and no value where there was None."""
    r = list(r)
    if len(r) != len(grads):
        raise RuntimeError(f"hook '{_hook_name(hook)}' has returned an incorrect number of "
                           f"values (got {len(r)}, but expected {len(grads)})")
    for old, new in zip(grads, r):
        if old is None and new is not None:
            raise RuntimeError("can't replace a None gradient with a non-None value")
    return r


def _report_anomaly(node, err):
    stack = "".join(node._stack)
    warnings.warn(f"Error detected in {node.name()}. Traceback of forward call that caused the "
                  f"error:\n{stack}", stacklevel=3)
    if hasattr(err, "add_note"):
        err.add_note(f"Traceback of forward call that caused the error:\n{stack}")


def run_backward(tensors, grad_tensors, retain_graph=False, create_graph=False, inputs=None,
                 allow_unused=False, accumulate=True):
    """The engine. With `inputs` and accumulate=False (autograd.grad) it returns their grads
    and touches no `.grad`; otherwise it accumulates into leaves (Tensor.backward)."""
    if inputs is None and not create_graph and len(tensors) == 1 and \
            type(tensors[0]) is not GradientEdge and \
            _one_node_backward(tensors[0], grad_tensors[0], retain_graph):
        return None
    roots = []
    for t, g in zip(tensors, grad_tensors):
        node, nr = _node_of(t)
        if node is None:
            raise RuntimeError("element 0 of tensors does not require grad and does not have a "
                               "grad_fn")
        roots.append((node, nr, g))

    capture = {}  # (node, output_nr) -> index into inputs
    if inputs is not None:
        for i, t in enumerate(inputs):
            node, nr = _node_of(t)
            if node is None:
                raise RuntimeError(f"One of the differentiated Tensors (index {i}) does not "
                                   f"require grad")
            capture.setdefault((node, nr), []).append(i)

    # Discover the graph and count dependencies; with `inputs`, keep only nodes on a path to one.
    order, seen, stack = [], set(), [n for n, _, _ in roots]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        order.append(n)
        stack.extend(nf for nf, _ in n.next_functions if nf is not None and nf not in seen)
    deps = dict.fromkeys(seen, 0)
    for n in seen:
        for nf, _ in n.next_functions:
            if nf is not None:
                deps[nf] += 1
    if inputs is not None:
        # keep only nodes on a path to a captured input (children before parents via Kahn)
        indeg, topo = dict(deps), []
        ready = [n for n in seen if indeg[n] == 0]
        while ready:
            n = ready.pop()
            topo.append(n)
            for nf, _ in n.next_functions:
                if nf is not None:
                    indeg[nf] -= 1
                    if indeg[nf] == 0:
                        ready.append(nf)
        targets = {n for n, _ in capture}
        needed = set()
        for n in reversed(topo):
            if n in targets or any(nf in needed for nf, _ in n.next_functions):
                needed.add(n)
        run = {n for n in needed if any(nf in needed for nf, _ in n.next_functions)
               or (accumulate and (isinstance(n, AccumulateGrad) or n in targets))}
        # (backward(inputs=...) runs the nodes of the inputs, their hooks included, as
        # PyTorch does; autograd.grad only reads the gradient flowing into them)
        deps = dict.fromkeys(needed, 0)
        for n in run:
            for nf, _ in n.next_functions:
                if nf in deps:
                    deps[nf] += 1
    else:
        run = seen

    buffers = {}
    results = [None] * (len(inputs) if inputs is not None else 0)

    def add_grad(node, nr, g):
        buf = buffers.setdefault(node, [None] * max(1, len(node._out_avals)))
        buf[nr] = g if buf[nr] is None else buf[nr] + g

    for node, nr, g in roots:
        if node in deps or (node, nr) in capture:
            add_grad(node, nr, g)
    heap = [(-n._seq, n) for n in {n for n, _, _ in roots} if deps.get(n, 0) == 0]
    # roots that are also inputs of other roots wait for their dependencies
    heapq.heapify(heap)
    task = GraphTask(deps, inputs is not None)
    graph_tasks.stack.append(task)
    try:
        _drain(heap, buffers, deps, run, capture, results, accumulate, retain_graph,
               create_graph, add_grad)
    finally:
        graph_tasks.stack.pop()
        for n in task.deferred:
            n._release()
    if inputs is not None:
        for i, r in enumerate(results):
            if r is None and not allow_unused:
                raise RuntimeError(f"The differentiated Tensor at index {i} appears to not have "
                                   f"been used in the graph. Set allow_unused=True if this is "
                                   f"the desired behavior.")
        return results
    return None


def _drain(heap, buffers, deps, run, capture, results, accumulate, retain_graph, create_graph,
           add_grad):
    """Run the ready nodes of a backward pass, latest-made first."""
    with grad_mode.set_grad_enabled(create_graph):
        while heap:
            _, node = heapq.heappop(heap)
            grads = buffers.pop(node, [None] * max(1, len(node._out_avals)))
            if node not in run:  # only captured: tensor hooks run first (as in PyTorch)
                grads = _tensor_pre_hooks(node, grads, accumulate)
                for nr, g in enumerate(grads):
                    for i in capture.get((node, nr), ()):
                        results[i] = g
                continue
            if capture:  # captured and run: PyTorch captures before the tensor hooks
                for nr, g in enumerate(grads):
                    for i in capture.get((node, nr), ()):
                        results[i] = g
            grads = _tensor_pre_hooks(node, grads, accumulate)
            if type(node) is AccumulateGrad and not (node._pre_hooks or node._hooks or
                                                     profiling._profilers):
                accumulate_grad(node.variable, grads[0], create_graph)  # the common sink
                continue
            outs = _run_node(node, grads, create_graph)
            if not retain_graph:
                if not node._in_composite:
                    node._release()
                else:  # a prim's node inside a composite node: that node may run it again
                    release_after_pass((node,))
            for (nf, nr), g in zip(node.next_functions, outs):
                if nf is None or nf not in deps:
                    continue
                if g is not None:
                    add_grad(nf, nr, g)
                deps[nf] -= 1
                if deps[nf] == 0:
                    heapq.heappush(heap, (-nf._seq, nf))


def run_subgraph(roots, grads, stops, create_graph):
    """Backward through a closed piece of the graph: from the (node, output_nr) edges
    `roots`, given their gradients, down to the edges `stops`; returns one gradient per stop
    edge (None where none arrives; a stop edge listed twice gets it once). Nodes beyond the
    stops are not visited. A node that stands for several prims (runtime.composite) runs its
    prims' nodes with this."""
    where = {}
    for i, (n, nr) in enumerate(stops):
        if n is not None:
            where.setdefault((n, nr), i)
    stop_nodes = {n for n, _ in where}
    results = [None] * len(stops)

    def capture(node, nr, g):
        i = where[(node, nr)]
        results[i] = g if results[i] is None else results[i] + g

    seen, stack = set(), [n for n, _ in roots if n is not None and n not in stop_nodes]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        stack.extend(nf for nf, _ in n.next_functions
                     if nf is not None and nf not in seen and nf not in stop_nodes)
    deps = dict.fromkeys(seen, 0)
    for n in seen:
        for nf, _ in n.next_functions:
            if nf in deps:
                deps[nf] += 1
    buffers = {}
    for (n, nr), g in zip(roots, grads):
        if n is None or g is None:
            continue
        if (n, nr) in where:
            capture(n, nr, g)
            continue
        buf = buffers.setdefault(n, [None] * max(1, len(n._out_avals)))
        buf[nr] = g if buf[nr] is None else buf[nr] + g
    heap = [(-n._seq, n) for n in {n for n, _ in roots if n in deps} if deps[n] == 0]
    heapq.heapify(heap)
    while heap:
        _, node = heapq.heappop(heap)
        grads_in = buffers.pop(node, [None] * max(1, len(node._out_avals)))
        outs = _run_node(node, grads_in, create_graph)
        for (nf, nr), g in zip(node.next_functions, outs):
            if nf is None:
                continue
            if (nf, nr) in where:
                if g is not None:
                    capture(nf, nr, g)
                continue
            if nf not in deps:
                continue
            if g is not None:
                buf = buffers.setdefault(nf, [None] * max(1, len(nf._out_avals)))
                buf[nr] = g if buf[nr] is None else buf[nr] + g
            deps[nf] -= 1
            if deps[nf] == 0:
                heapq.heappush(heap, (-nf._seq, nf))
    return results


def _one_node_backward(t, g, retain_graph):
    """`loss.backward()` where loss's grad_fn feeds only plain leaves (a compiled function's
    output, or `x * w`): the general loop's result without its bookkeeping. Returns
    False, having done nothing, when anything needs the general loop (hooks, retain_grad,
    profiling, anomaly mode, tracing, a leaf reached twice)."""
    node = t.grad_fn
    if node is None or type(node) is AccumulateGrad or node._pre_hooks or node._hooks or \
            node._tensor_pre_hooks or node._retain_grad or node._provenance is not None or \
            profiling._profilers or _mode.anomaly:
        return False
    sinks = set()
    for nf, _ in node.next_functions:
        if nf is None:
            continue
        if type(nf) is not AccumulateGrad or nf._pre_hooks or nf._hooks or nf in sinks or \
                nf.variable._hooks or nf.variable._post_acc_hooks:
            return False
        sinks.add(nf)
    grads = [None] * max(1, len(node._out_avals))
    grads[t._output_nr] = g
    prev, _mode.grad_enabled = _mode.grad_enabled, False
    try:
        if getattr(node, "materialize_grads", True):
            grads = node._materialize(grads)
        outs = list(node._backward(grads))
    finally:
        _mode.grad_enabled = prev
    if not retain_graph:
        node._release()
    if len(outs) != len(node.next_functions):
        raise RuntimeError(f"Function {node.name()} returned an incorrect number of "
                           f"gradients (expected {len(node.next_functions)}, got {len(outs)})")
    for i, ((nf, _), g, aval) in enumerate(zip(node.next_functions, outs, node._in_avals)):
        if nf is not None and g is not None:
            accumulate_grad(nf.variable, _check_grad(node, i, g, aval), False)
    return True


def _tensor_pre_hooks(node, grads, accumulate=True):
    """Hooks registered with Tensor.register_hook, then retain_grad, per output slot."""
    if isinstance(node, AccumulateGrad):
        v = node.variable
        # a real leaf reached while deriving a compiled backward (autograd.grad on traced
        # tensors): its hooks fire when the compiled backward runs, not now
        if v._hooks and grads[0] is not None and \
                (accumulate or type(grads[0]._value) is type(v._value)):
            for h in list(v._hooks):
                r = h(grads[0])
                if r is not None:
                    grads[0] = _checked_hook_result(h, grads[0], r)
        return grads
    for nr, hooks in node._tensor_pre_hooks.items():
        if grads[nr] is None:
            continue
        for h in list(hooks):
            r = h(grads[nr])
            if r is not None:
                grads[nr] = _checked_hook_result(h, grads[nr], r)
    for nr, ref in node._retain_grad.items():
        t = ref()
        # (a tensor modified in place since retain_grad() now has another grad_fn: the
        # gradient of its old value is not its .grad)
        if t is not None and grads[nr] is not None and t.grad_fn is node:
            accumulate_retained(t, grads[nr])
    return grads


def accumulate_retained(t, g):
    """Add g into the .grad of t, a non-leaf that retains its gradient (a copy of g outside
    grad mode: g may be a buffer the backward reuses)."""
    if t._grad is not None:
        t._grad = t._grad + g
    elif _mode.grad_enabled:
        t._grad = g
    else:
        t._grad = Tensor._make(np.array(g._value, copy=True), False) \
            if isinstance(g._value, np.ndarray) else g.detach()


def _checked_hook_result(hook, g, r):
    """A tensor hook's replacement gradient must keep the gradient's shape and dtype."""
    if not isinstance(r, Tensor):
        raise TypeError(f"hook '{_hook_name(hook)}' returned {type(r).__name__}; a tensor hook "
                        f"must return a Tensor or None")
    if r._value.shape != g._value.shape:
        raise RuntimeError(f"hook '{_hook_name(hook)}' has changed the size of value "
                           f"(was {list(g._value.shape)} got {list(r._value.shape)})")
    if r.dtype is not g.dtype:
        old, new = g.dtype.name, r.dtype.name
        raise RuntimeError(f"hook '{_hook_name(hook)}' has changed the type of value (was "
                           f"aotgrad.{_LEGACY_TYPE.get(old, old)} got "
                           f"aotgrad.{_LEGACY_TYPE.get(new, new)})")
    return r


def _hook_name(hook):
    return getattr(hook, "__name__", type(hook).__name__)


def note_grad_write(t):
    """Tell an active tracer that a real tensor's .grad is about to change."""
    b = _current_builder()
    if b is not None and hasattr(b, "note_grad_write"):
        b.note_grad_write(t)



def weak(t):
    return weakref.ref(t)
