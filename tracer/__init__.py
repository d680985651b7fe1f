"""Capture: run model code on traced tensors (values are IR Vars) to record a forward Graph,
lift parameters and closed-over tensors to graph inputs, detect graph breaks, and derive the
backward ahead of time by running the eager engine on the traced outputs (the joint graph)."""
from aotgrad.tracer.trace import GraphBreakError, trace  # noqa: F401
from aotgrad.tracer.trace_result import Mutation, OutputLayout, Role, TraceResult  # noqa: F401
