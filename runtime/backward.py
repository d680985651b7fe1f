"""The backward pass: from the roots' gradients down the graph of nodes, each run once
its consumers have all given their gradient (latest made first), into the leaves' `.grad`
(`Tensor.backward`) or into the gradients `autograd.grad` returns.

It depends on the node protocol of runtime/autograd_node.py. A node's backward runs in one
place, `_run_node`, whichever way the pass goes: the general loop (`run_backward`), a closed
piece of the graph (`run_subgraph`, for composite nodes), or the short way of a
`loss.backward()` that needs none of the loop's bookkeeping (`fast_path_ok`).
"""
import heapq
import threading
import warnings

import numpy as np

from aotgrad.ir.core import current_provenance
from aotgrad.runtime.sizes import size_list
from aotgrad.runtime import grad_mode, profiling
from aotgrad.runtime.autograd_node import AccumulateGrad, GradientEdge, _node_of, fast_path_ok
from aotgrad.runtime.backward_hooks import run_post_hooks, run_pre_hooks, \
    run_tensor_pre_hooks
from aotgrad.runtime.backward_reentrant import MAX_REENTRANT_DEPTH, run_on_fresh_stack
from aotgrad.runtime.grad_accumulation import accumulate_grad, plain_leaves
from aotgrad.runtime.grad_mode import state as _mode


def run_backward(tensors, grad_tensors, retain_graph=False, create_graph=False, inputs=None,
                 allow_unused=False, accumulate=True):
    """The engine. With `inputs` and accumulate=False (autograd.grad) it returns their grads
    and touches no `.grad`; otherwise it accumulates into leaves (Tensor.backward)."""
    if len(graph_tasks.stack) >= MAX_REENTRANT_DEPTH:  # deeply nested: a new stack
        return run_on_fresh_stack(run_backward, tensors, grad_tensors, retain_graph,
                                  create_graph, inputs, allow_unused, accumulate)
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
        task.run_callbacks()
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
                grads = run_tensor_pre_hooks(node, grads, accumulate)
                for nr, g in enumerate(grads):
                    for i in capture.get((node, nr), ()):
                        results[i] = g
                continue
            if capture:  # captured and run: PyTorch captures before the tensor hooks
                for nr, g in enumerate(grads):
                    for i in capture.get((node, nr), ()):
                        results[i] = g
            grads = run_tensor_pre_hooks(node, grads, accumulate)
            if type(node) is AccumulateGrad and not (node._pre_hooks or node._hooks or
                                                     profiling._profilers):
                accumulate_grad(node.variable, grads[0], create_graph)  # the common sink
                continue
            outs = _run_node(node, grads, create_graph)
            if not retain_graph:
                _release_ran(node)
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
    """`loss.backward()` where loss's node feeds only plain leaves (`x * w`): the node runs
    as in the general loop (`_run_node`), and its gradients go straight to the leaves.
    Returns False, having done nothing, where the general loop is needed (see fast_path_ok;
    a leaf reached twice or with hooks)."""
    node = t.grad_fn
    if node is None or type(node) is AccumulateGrad or not fast_path_ok(node):
        return False
    leaves = []
    for nf, _ in node.next_functions:
        if nf is None:
            continue
        if type(nf) is not AccumulateGrad or nf._pre_hooks or nf._hooks:
            return False
        leaves.append(nf.variable)
    if not plain_leaves(leaves):
        return False
    grads = [None] * max(1, len(node._out_avals))
    grads[t._output_nr] = g
    prev, _mode.grad_enabled = _mode.grad_enabled, False
    task = GraphTask(None, False)  # (a node's backward may queue engine callbacks)
    graph_tasks.stack.append(task)
    try:
        outs = _run_node(node, grads, False)
        if not retain_graph:
            _release_ran(node)
        for (nf, _), g in zip(node.next_functions, outs):
            if nf is not None:
                accumulate_grad(nf.variable, g, False)
    finally:
        _mode.grad_enabled = prev
        graph_tasks.stack.pop()
    task.run_callbacks()
    return True


def _release_ran(node):
    """Free what a node saved, after it ran in a pass that does not retain the graph."""
    if not node._in_composite:
        node._release()
    else:  # a prim's node inside a composite node: that node may run it again
        release_after_pass((node,))


def _run_node(node, grads, create_graph):
    """Run one node: its pre-hooks, its backward (with profiling, the forward op's
    provenance while tracing, anomaly mode), the checks of what it returned, its hooks."""
    if node._pre_hooks:
        grads = run_pre_hooks(node, grads)
    skip = not node.runs_without_grads and _all_none(grads)
    if skip or isinstance(node, AccumulateGrad):
        grads_in = grads
    elif node._none_in_none_out and _all_none(grads):
        outs = [None] * len(node.next_functions)
        return run_post_hooks(node, outs, grads) if node._hooks else outs
    else:
        grads_in = node._materialize(grads) if getattr(node, "materialize_grads", True) else grads
    token = current_provenance.set(node._provenance.with_phase("bw")) \
        if node._provenance is not None else None
    try:
        if skip:
            outs = [None] * len(node.next_functions)
        elif profiling._profilers:
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
        outs = _checked_gradients(node, outs)
    if node._hooks:
        outs = run_post_hooks(node, outs, grads)
    return outs


def _checked_gradients(node, outs):
    """What a node's backward returned: one gradient per input (PyTorch's error otherwise),
    each of its input's shape and dtype (`_check_grad`), none for an input without an edge;
    under anomaly mode, no NaN."""
    if len(outs) != len(node.next_functions):
        raise RuntimeError(f"function {node.name()} returned an incorrect number of gradients "
                           f"(expected {len(node.next_functions)}, got {len(outs)})")
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
    return outs


def _all_none(grads):
    for g in grads:  # (not `None in grads` nor all(): that calls Tensor.__eq__ / costs more)
        if g is not None:
            return False
    return True


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
                if np.broadcast_shapes(tuple(g.shape), aval.shape) == tuple(g.shape):
                    return g._sum_to_shape(aval.shape)
            except ValueError:
                pass
        raise RuntimeError(f"Function {node.name()} returned an invalid gradient at index {i} - "
                           f"got {size_list(g.shape)} but expected shape compatible with "
                           f"{size_list(aval.shape)}")
    if g.dtype is not aval.dtype and aval.dtype.is_floating_point and not (
            type(dest) is AccumulateGrad and
            dest.variable.__dict__.get("_grad_dtype", aval.dtype) is None):
        g = g.to(aval.dtype)
    return g


def _report_anomaly(node, err):
    stack = "".join(node._stack)
    warnings.warn(f"Error detected in {node.name()}. Traceback of forward call that caused the "
                  f"error:\n{stack}", stacklevel=3)
    if hasattr(err, "add_note"):
        err.add_note(f"Traceback of forward call that caused the error:\n{stack}")


class GraphTask:
    """One running backward pass: `deps`, the nodes it will reach (which hooks ask about),
    `deferred`, nodes whose saved tensors are freed when it ends rather than when they
    ran (the prims' nodes inside a composite node, which may run again through it), and
    `callbacks`, what `Variable._execution_engine.queue_callback` asked to run once every
    node has run."""
    __slots__ = ("deps", "deferred", "only_inputs", "callbacks", "__weakref__")

    def __init__(self, deps, only_inputs):
        self.deps = deps
        self.deferred = []
        self.only_inputs = only_inputs  # autograd.grad or backward(inputs=...)
        self.callbacks = []

    def run_callbacks(self):
        """The queued callbacks, in order, those they queue included (PyTorch's final
        callbacks: still inside the pass, so a callback may queue another)."""
        i = 0
        while i < len(self.callbacks):
            self.callbacks[i]()
            i += 1
        self.callbacks.clear()


class ExecutionEngine:
    """`autograd.Variable._execution_engine`: the engine's Python handle, as in PyTorch."""

    @staticmethod
    def queue_callback(callback):
        """Run `callback()` when the running backward pass has run all its nodes."""
        if not graph_tasks.stack:
            raise RuntimeError("Final callbacks can only be installed during backward pass.")
        graph_tasks.stack[-1].callbacks.append(callback)

    @staticmethod
    def is_checkpoint_valid():
        """False inside a pass that computes the gradients of given inputs only
        (`autograd.grad`, `backward(inputs=...)`), where reentrant checkpointing cannot run."""
        return not (graph_tasks.stack and graph_tasks.stack[-1].only_inputs)


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
