"""Anomaly mode, as in `torch.autograd.anomaly_mode`.

>>> x = aotgrad.tensor([4., 9.], requires_grad=True)
>>> with aotgrad.autograd.detect_anomaly():
...     y = x.sqrt()          # every node records this forward stack
...     y.sum().backward()    # a NaN gradient raises, naming the node and this line

While on, each graph node stores the stack of the forward call that created it. When a
node's backward fails, a warning shows "Error detected in <Node>. Traceback of forward call
that caused the error:" with the user's file, line and source, and the error carries the
same text as a note; a node whose backward returns NaN raises
`RuntimeError("Function '<Node>' returned nan values in its 0th output.")`. Off by default;
when off, nodes record nothing.
"""
from aotgrad.runtime.grad_mode import (detect_anomaly, is_anomaly_check_nan_enabled,
                                       is_anomaly_enabled, set_detect_anomaly)

__all__ = ["detect_anomaly", "set_detect_anomaly", "is_anomaly_enabled",
           "is_anomaly_check_nan_enabled"]
