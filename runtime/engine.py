"""The autograd engine, by job (this module gathers their names for the rest of the package):

- runtime/autograd_node.py: the graph's nodes (`Node`, `AccumulateGrad`, `GradientEdge`),
  the hook handles, `fast_path_ok`; imports no Tensor
- runtime/saved_tensors.py: tensors saved for backward and the saved-tensor hooks' state
- runtime/backward.py: the backward pass (`run_backward`, `run_subgraph`), where every
  node's backward runs
- runtime/backward_hooks.py: tensor hooks, node pre-hooks and hooks, retain_grad
- runtime/grad_accumulation.py: the one place `.grad` grows (`accumulate_grad`)

A node's backward is written with tensor ops, so running it under grad mode
(`create_graph=True`) records a differentiable graph of the backward itself, and running it
on traced tensors records the backward into the IR.
"""
from aotgrad.runtime.autograd_node import (AccumulateGrad, GradientEdge, Node,  # noqa: F401
                                           RemovableHandle, _node_of, fast_path_ok,
                                           next_sequence_nr)
from aotgrad.runtime.backward import (ExecutionEngine, GraphTask,  # noqa: F401
                                      _one_node_backward, graph_tasks, release_after_pass,
                                      run_backward, run_subgraph)
from aotgrad.runtime.backward_hooks import _checked_hook_result  # noqa: F401
from aotgrad.runtime.grad_accumulation import (accumulate_array, accumulate_grad,  # noqa: F401
                                               accumulate_retained, fresh, note_grad_write,
                                               plain_leaves, write_grad)
from aotgrad.runtime.saved_tensors import (FREED_MESSAGE, INFERENCE_SAVE_MESSAGE,  # noqa: F401
                                           SavedTensor, SavedTensorModifiedError, saved_hooks)
from aotgrad.runtime.version_counter import VersionCounter  # noqa: F401
