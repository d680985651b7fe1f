"""The autograd profiler, laid out like `torch.autograd.profiler`.

>>> x = aotgrad.randn(8, requires_grad=True)
>>> with aotgrad.autograd.profiler.profile() as prof:
...     with aotgrad.autograd.profiler.record_function("step"):
...         loss = (x * 2).tanh().sum()
...     loss.backward()
>>> # (not run as a doctest: the table's timings vary, and the trace is a file)
>>> print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=10))  # doctest: +SKIP
>>> prof.export_chrome_trace("trace.json")  # doctest: +SKIP

Every user-level op ("mul"), prim ("prims.mul"), custom Function, backward node
("MulBackward0"), `record_function` range and compiled kernel is one event with its start
and end; an event's self time is its total time minus its children's.

A compiled program's call is one event ("<name>.forward", ".backward", ".inference") whose
children are its steps: each fused kernel ("kernel k_<hash> (rows 64x128, 9 nodes)"), each
matrix product ("matmul 32x(128x64 @ 64x128) float32") and each step left to numpy, with
the shapes it reads (`input_shapes`), its fused node count (`fused_nodes`), the bytes it
reads and writes (`bytes`) and a product's `flops`. The table adds their totals and the
achieved GB/s and GFLOP/s; the Chrome trace puts them in each event's args, on the lane of
the thread that ran the program. (While a profiler runs, compiled programs run an
instrumented copy of their driver; otherwise they read no clock.)
"""
import json
import os
import threading
import time

from aotgrad.runtime import profiling

__all__ = ["profile", "record_function", "EventList", "FunctionEvent", "FunctionEventAvg",
           "kineto_available"]


class Interval:
    """[start, end] in microseconds since the profiler started."""
    __slots__ = ("start", "end")

    def __init__(self, start, end):
        self.start, self.end = start, end

    def elapsed_us(self):
        return self.end - self.start


class _FormattedTimes:
    """`cpu_time_str`, `cpu_time_total_str`, `self_cpu_time_total_str`: the times formatted
    as in the table ("1.234ms"), as PyTorch's events have them."""

    @property
    def cpu_time_str(self):
        return _format_time(self.cpu_time)

    @property
    def cpu_time_total_str(self):
        return _format_time(self.cpu_time_total)

    @property
    def self_cpu_time_total_str(self):
        return _format_time(self.self_cpu_time_total)


class FunctionEvent(_FormattedTimes):
    """One timed call: `name`, `kind`, `time_range`, `cpu_time_total`, `self_cpu_time_total`
    (microseconds), `cpu_parent`, `cpu_children`, `thread`."""

    def __init__(self, id, name, thread, start_us, end_us=None, *, kind="op", parent=None,
                 node_id=-1, input_shapes=None, sequence_nr=-1, fwd_thread=None, flops=0,
                 bytes=0, fused_nodes=0, detail="", **_):
        # (PyTorch's constructor: id, name, thread, start_us, end_us and keyword-only details;
        # those aotgrad does not record are accepted and ignored)
        self.id, self.name, self.kind, self.thread = id, name, kind, thread
        self.time_range = Interval(start_us, start_us if end_us is None else end_us)
        self.cpu_parent, self.cpu_children = parent, []
        self.node_id, self.input_shapes, self.sequence_nr = node_id, input_shapes, sequence_nr
        self.fwd_thread = fwd_thread
        # a compiled program's step: floating-point operations (products), bytes read and
        # written, IR nodes fused into it, how it ran
        self.flops, self.bytes, self.fused_nodes, self.detail = flops, bytes, fused_nodes, detail
        self.count = 1

    @property
    def key(self):
        return self.name

    @property
    def cpu_time_total(self):
        return self.time_range.elapsed_us()

    @property
    def cpu_time(self):
        return self.cpu_time_total

    @property
    def self_cpu_time_total(self):
        return self.cpu_time_total - sum(c.cpu_time_total for c in self.cpu_children)

    @property
    def gflops_per_s(self):
        return _rate(self.flops, self.cpu_time_total)

    @property
    def gbytes_per_s(self):
        return _rate(self.bytes, self.cpu_time_total)

    def __repr__(self):
        return (f"<FunctionEvent id={self.id} name={self.name} kind={self.kind} "
                f"cpu_time={_format_time(self.cpu_time_total)} "
                f"self_cpu_time={_format_time(self.self_cpu_time_total)} "
                f"children={[c.id for c in self.cpu_children]}>")


class FunctionEventAvg(_FormattedTimes):
    """The events of one name added up: `key`, `count`, `cpu_time_total`,
    `self_cpu_time_total` and `cpu_time` (the average per call)."""

    def __init__(self, key=None):
        self.key, self.count = key, 0
        self.cpu_time_total = self.self_cpu_time_total = 0.0
        self.kind = None
        self.flops = self.bytes = self.fused_nodes = 0
        self.input_shapes = None

    def add(self, other):
        if self.key is None:
            self.key, self.kind = other.key, other.kind
            self.fused_nodes, self.input_shapes = other.fused_nodes, other.input_shapes
        self.count += other.count
        self.cpu_time_total += other.cpu_time_total
        self.self_cpu_time_total += other.self_cpu_time_total
        self.flops += other.flops
        self.bytes += other.bytes
        return self

    @property
    def gflops_per_s(self):
        return _rate(self.flops, self.cpu_time_total)

    @property
    def gbytes_per_s(self):
        return _rate(self.bytes, self.cpu_time_total)

    @property
    def cpu_time(self):
        return self.cpu_time_total / self.count if self.count else 0.0

    def __repr__(self):
        return (f"<FunctionEventAvg key={self.key} count={self.count} "
                f"cpu_time={_format_time(self.cpu_time)} "
                f"self_cpu_time_total={_format_time(self.self_cpu_time_total)}>")


class EventList(list):
    """A list of events with PyTorch's reports: `table`, `key_averages`, `total_average`,
    `export_chrome_trace`."""

    @property
    def self_cpu_time_total(self):
        return sum(e.self_cpu_time_total for e in self)

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0):
        groups = {}
        for e in self:
            groups.setdefault(e.key, FunctionEventAvg()).add(e)
        return EventList(groups.values())

    def total_average(self):
        total = FunctionEventAvg("Total")
        for e in self:
            total.count += e.count
            total.cpu_time_total += e.cpu_time_total
            total.self_cpu_time_total += e.self_cpu_time_total
        return total

    def table(self, sort_by=None, row_limit=100, max_src_column_width=75,
              max_name_column_width=55, max_shapes_column_width=80, header=None,
              top_level_events_only=False):
        """The text table: Name, Self CPU %, Self CPU, CPU total %, CPU total, CPU time avg,
        # of Calls; sorted by an event attribute (largest first) when `sort_by` is given."""
        return _build_table(self, sort_by, row_limit, max_name_column_width, header,
                            top_level_events_only)

    def export_chrome_trace(self, path):
        _write_chrome_trace(self, path)

    def __str__(self):
        return self.table()


class profile:
    """Record every op, prim, backward node, user range and kernel run inside the block.

    `function_events` lists them; `key_averages()` groups them by name; `table(...)` and
    `export_chrome_trace(path)` report them. Arguments PyTorch accepts for CUDA, shapes,
    memory or stacks are accepted and ignored (this profiler measures CPU time only).
    """

    def __init__(self, enabled=True, *, use_cuda=False, use_device=None, record_shapes=False,
                 with_flops=False, profile_memory=False, with_stack=False, with_modules=False,
                 use_kineto=False, use_cpu=True, experimental_config=None, acc_events=False,
                 custom_trace_id_callback=None):
        self.enabled = enabled
        self.record_shapes, self.with_stack = record_shapes, with_stack
        self._events = []
        self._stacks = {}          # thread id -> open events
        self._thread_names = {}    # thread id -> its name (the Chrome trace's lanes)
        self._t0 = None
        self._running = False
        self._finished = False
        self._lock = threading.Lock()

    # ---- context manager ----------------------------------------------------------------
    def __enter__(self):
        if not self.enabled:
            return self
        if self._running:
            raise RuntimeError("Profiler context manager is not reentrant")
        self._t0 = time.perf_counter_ns()
        self._running = True
        profiling._profilers.append(self)
        return self

    def __exit__(self, *exc):
        if not self.enabled:
            self._finished = True
            return False
        if self in profiling._profilers:
            profiling._profilers.remove(self)
        end = time.perf_counter_ns()
        for stack in self._stacks.values():  # close ranges left open by an exception
            while stack:
                stack.pop().time_range.end = self._us(end)
        self._running, self._finished = False, True
        return False

    # ---- hooks called by runtime.profiling ----------------------------------------------
    def _us(self, ns):
        return (ns - self._t0) / 1000.0

    def _thread_stack(self):
        tid = threading.get_ident()
        stack = self._stacks.get(tid)
        if stack is None:
            stack = self._stacks[tid] = []
            self._thread_names[tid] = threading.current_thread().name
        return stack

    def _push(self, name, kind, start_ns, shapes=None):
        stack = self._thread_stack()
        parent = stack[-1] if stack else None
        with self._lock:
            ev = FunctionEvent(len(self._events), name, threading.get_ident(),
                               self._us(start_ns), kind=kind, parent=parent,
                               input_shapes=shapes if self.record_shapes else None)
            self._events.append(ev)
        if parent is not None:
            parent.cpu_children.append(ev)
        stack.append(ev)

    def _pop(self, name, kind, end_ns):
        stack = self._stacks.get(threading.get_ident())
        if not stack:
            return
        ev = stack.pop()
        ev.time_range.end = self._us(end_ns)

    def _add(self, name, kind, start_ns, end_ns, details=None):
        stack = self._thread_stack()
        parent = stack[-1] if stack else None
        with self._lock:
            ev = FunctionEvent(len(self._events), name, threading.get_ident(),
                               self._us(start_ns), kind=kind, parent=parent, **(details or {}))
            self._events.append(ev)
        ev.time_range.end = self._us(end_ns)
        if parent is not None:
            parent.cpu_children.append(ev)

    # ---- reports ------------------------------------------------------------------------
    def _check_finished(self):
        if not self._finished:
            raise RuntimeError("Profiler didn't finish running")

    @property
    def function_events(self):
        self._check_finished()
        return EventList(self._events)

    def events(self):
        """All recorded events (an EventList), like `torch.profiler.profile.events()`."""
        return self.function_events

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0):
        """Events grouped by name (an EventList of FunctionEventAvg)."""
        return self.function_events.key_averages(group_by_input_shape, group_by_stack_n)

    def table(self, sort_by=None, row_limit=100, max_src_column_width=75,
              max_name_column_width=55, max_shapes_column_width=80, header=None,
              top_level_events_only=False):
        return self.function_events.table(sort_by, row_limit, max_src_column_width,
                                          max_name_column_width, max_shapes_column_width,
                                          header, top_level_events_only)

    def total_average(self):
        return self.function_events.total_average()

    @property
    def self_cpu_time_total(self):
        return self.function_events.self_cpu_time_total

    def export_chrome_trace(self, path):
        """Write the events as Chrome trace JSON (chrome://tracing, Perfetto)."""
        self._check_finished()
        _write_chrome_trace(self._events, path, self._thread_names)

    def __str__(self):
        return self.table() if self._finished else "<unfinished profiler>"


class record_function:
    """Mark a user range: `with record_function("name"): ...` or `@record_function("name")`.
    Costs nothing when no profiler is running."""

    def __init__(self, name, args=None):
        self.name, self.args = name, args
        self._cm = None

    def __enter__(self):
        if profiling._profilers:
            self._cm = profiling.record(self.name, kind="user")
            self._cm.__enter__()
        return self

    def __exit__(self, *exc):
        cm, self._cm = self._cm, None
        if cm is not None:
            cm.__exit__(*exc)
        return False

    def __call__(self, fn):
        import functools

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with record_function(self.name, self.args):
                return fn(*args, **kwargs)
        return wrapper


# ---- formatting ----------------------------------------------------------------------------
def _format_time(us):
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


def _format_percent(part, total):
    return f"{100.0 * part / total:.2f}%" if total > 0 else "0.00%"


def _rate(amount, us):
    """amount per second in units of 1e9 (GFLOP/s, GB/s) over `us` microseconds."""
    return amount / (us * 1e3) if us > 0 else 0.0


_COLUMNS = ("Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg", "# of Calls")
# shown when compiled programs' steps were recorded
_STEP_COLUMNS = ("Nodes", "MB", "GB/s", "GFLOPs", "GFLOP/s")


def _step_cells(e):
    if not (e.bytes or e.flops):
        return ("",) * len(_STEP_COLUMNS)
    return (e.fused_nodes or "", f"{e.bytes / 1e6:.3f}", f"{e.gbytes_per_s:.2f}",
            f"{e.flops / 1e9:.3f}" if e.flops else "",
            f"{e.gflops_per_s:.1f}" if e.flops else "")


def _build_table(events, sort_by, row_limit, max_name_width, header, top_level_only):
    if top_level_only:
        events = [e for e in events if getattr(e, "cpu_parent", None) is None]
    total_self = sum(e.self_cpu_time_total for e in events)
    rows = list(events)
    if sort_by is not None:
        if rows and not hasattr(rows[0], sort_by):
            raise AttributeError(f"sort_by: events have no attribute {sort_by!r} (try "
                                 f"'self_cpu_time_total', 'cpu_time_total', 'cpu_time' or "
                                 f"'count')")
        rows.sort(key=lambda e: getattr(e, sort_by), reverse=True)
    if row_limit is not None and row_limit > 0:
        rows = rows[:row_limit]
    name_w = min(max([len(e.key) for e in rows] + [4]) + 4, max_name_width)
    steps = any(getattr(e, "bytes", 0) or getattr(e, "flops", 0) for e in rows)
    columns = _COLUMNS + (_STEP_COLUMNS if steps else ())
    widths = (name_w,) + (12,) * len(_COLUMNS) + (8,) * (len(columns) - len(_COLUMNS))
    sep = "".join("-" * w + "  " for w in widths)

    def line(cells):
        return "".join(str(c).rjust(w) + "  " for c, w in zip(cells, widths))

    out = []
    if header is not None:
        out += ["=" * len(sep), header]
    out += [sep, line(("Name",) + columns), sep]
    for e in rows:
        name = e.key if len(e.key) <= name_w else e.key[:name_w - 3] + "..."
        avg = e.cpu_time_total / e.count if e.count else 0.0
        out.append(line((name, _format_percent(e.self_cpu_time_total, total_self),
                         _format_time(e.self_cpu_time_total),
                         _format_percent(e.cpu_time_total, total_self),
                         _format_time(e.cpu_time_total), _format_time(avg), e.count)
                         + (_step_cells(e) if steps else ())))
    out.append(sep)
    out.append(f"Self CPU time total: {_format_time(total_self)}")
    return "\n".join(out) + "\n"


def _event_args(e):
    args = {"kind": e.kind}
    if e.input_shapes is not None:
        args["input_shapes"] = e.input_shapes
    if e.bytes or e.flops:
        args.update(fused_nodes=e.fused_nodes, bytes=e.bytes, flops=e.flops,
                    gb_per_s=round(e.gbytes_per_s, 3), detail=e.detail)
        if e.flops:
            args["gflop_per_s"] = round(e.gflops_per_s, 3)
    return args


def _write_chrome_trace(events, path, thread_names=None):
    """Chrome trace JSON: one complete ("X") event per event, on its thread's lane (named
    after the Python thread)."""
    pid = os.getpid()
    trace = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
              "args": {"name": "aotgrad"}}]
    for tid, name in (thread_names or {}).items():
        trace.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                      "args": {"name": name}})
    for e in events:
        trace.append({"name": e.name, "cat": e.kind, "ph": "X", "ts": e.time_range.start,
                      "dur": e.cpu_time_total, "pid": pid, "tid": e.thread,
                      "args": _event_args(e)})
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"traceEvents": trace, "displayTimeUnit": "ms"}, f)


def kineto_available():
    """Whether the profiler is backed by PyTorch's Kineto tracer: never here (aotgrad's
    profiler records its own events, on the CPU)."""
    return False
