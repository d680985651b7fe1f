"""Row programs (codegen.row_program) compiled to machine code by LLVM directly, for a
small fraction of what Numba's compile of their kernels costs, while the kernels wait for
that: `compile_program(program)` compiles codegen.row_lower's IR of it with llvmlite's
MCJIT into a function of integer addresses, run in parts on the thread pool's board
(NativeRows.run); `request(program, seconds)` queues that compile on one
background thread at the lowest niceness (it takes little CPU time from the steps), once
per distinct program, and sets `program.native` when it is done."""
import logging
import math
import os
import queue
import threading

from aotgrad.codegen import board, parts, row_lower, tiers

log = logging.getLogger(__name__)


def enabled():
    """AOTGRAD_ROW_NATIVE=0 keeps cold kernels' row programs on the row machine."""
    return os.environ.get("AOTGRAD_ROW_NATIVE", "1").strip() != "0"


class _Target:
    """LLVM's native target, initialised once per process; a target machine per compile
    (an execution engine owns its target machine and disposes of it with itself)."""
    _lock = threading.Lock()
    _host = None

    @classmethod
    def host(cls):
        import llvmlite.binding as llvm
        with cls._lock:
            if cls._host is None:
                llvm.initialize_native_target()
                llvm.initialize_native_asmprinter()
                cls._host = (llvm.Target.from_default_triple(), llvm.get_host_cpu_name(),
                             llvm.get_host_cpu_features().flatten())
        return cls._host

    @classmethod
    def float32_lanes(cls):
        """float32 elements in one of the CPU's vectors (as wide as kernels use: 512 bits
        where it has them and codegen.prelude asks for them)."""
        from aotgrad.codegen import prelude
        features = cls.host()[2].split(",")
        if "+avx512f" in features and prelude.VECTOR_WIDTH == "512":
            return 16
        return 8 if "+avx" in features else 4

    @classmethod
    def machine(cls):
        # (code generation at level 2: code as fast as level 3's, generated sooner; the IR's
        # passes run at their own level)
        target, cpu, features = cls.host()
        return target.create_target_machine(cpu=cpu, features=features, opt=2,
                                            codemodel="jitdefault")


class NativeRows:
    """A compiled row program (its function's address, called in parts: codegen.board's
    rows_part), on arrays none of whose outputs is one of its inputs (the code assumes they
    are apart: RowProgram.run checks)."""
    __slots__ = ("_keep", "address", "__weakref__")

    def __init__(self, keep, address):
        self._keep = keep                   # the context and engine: the code's lifetime
        self.address = address

    def __del__(self):
        # (disposed of under Numba's compiler lock too: see compile_program)
        keep, self._keep = self._keep, None
        try:
            from numba.core.compiler_lock import global_compiler_lock
            with global_compiler_lock:
                context, engine = keep
                engine.close()
                context.close()
        except Exception:       # the interpreter is exiting: the process frees it all
            pass

    def run(self, parts_, nrows, ain, aout, pre, scratch, scratch_stride, acc, acc_stride,
            idx):
        """Run over `nrows` rows in `parts_` parts (the arguments are addresses; strides in
        bytes), part i with scratch and accumulator row i: posted on the thread pool's board
        (codegen.board), where the workers take parts without the interpreter lock; on this
        thread alone where `parts_` is 1 (or the pool is busy: the same parts one after
        another). The arrays must stay alive until it returns."""
        args = (self.address, parts_, nrows, ain, aout, pre, scratch, scratch_stride, acc,
                acc_stride, idx)
        if parts_ == 1:
            return board.rows_serial(*args)
        return parts.run_posted(board.post_rows, args, board.rows_serial)


def compile_program(program):
    """`program` compiled (NativeRows), in an LLVM context of its own, holding Numba's
    compiler lock meanwhile: LLVM's state is not made for two threads at once, and Numba
    compiles and loads kernels on other threads of this process."""
    import llvmlite.binding as llvm
    from numba.core.compiler_lock import global_compiler_lock
    text = row_lower.lower(program, _Target.float32_lanes())   # (Python only)
    with global_compiler_lock:
        tm = _Target.machine()
        context = llvm.create_context()
        mod = llvm.parse_assembly(text, context=context)
        mod.verify()
        mod.triple = tm.triple
        mod.data_layout = str(tm.target_data)
        pto = llvm.create_pipeline_tuning_options(speed_level=2)
        pto.loop_vectorization = True
        pto.slp_vectorization = True
        pto.loop_unrolling = False
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)
        engine = llvm.create_mcjit_compiler(mod, tm)
        engine.finalize_object()
        return NativeRows((context, engine), engine.get_function_address("rows"))


def program_key(program):
    """What `lower` reads of `program`: programs of equal keys compile to the same code (a
    kernel run at several shapes, an optimizer's update of each parameter, differ in their
    number of rows only, which is an argument)."""
    pre = []
    for p in program.pre:
        value = p.value.tobytes() if p.value is not None else None
        size = math.prod(p.node.inputs[0].shape) if p.node is not None else None
        pre.append((program.offsets[p.var], p.length, str(p.var.dtype), value, size))
    return (program.code.tobytes(), program.code.shape, program.group, tuple(pre),
            len(program.inputs), len(program.outputs), program.float32_scratch)


def _lowest_priority():
    """The calling thread at niceness 19 (Linux: niceness is per thread)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):     # not on this OS: the usual priority
        pass


class _Compiler:
    """One background thread compiling queued programs, those that took longest on the
    row machine first, each key once: a program whose key is compiled or queued already
    gets that code."""

    def __init__(self):
        self.jobs = queue.PriorityQueue()      # (-seconds, sequence number, key, program)
        self.seq = 0
        self.started = False
        self.lock = threading.Lock()
        self.done = {}          # key -> NativeRows, or None (it failed)
        self.waiting = {}       # key -> programs queued for it

    def submit(self, program, seconds):
        key = program_key(program)
        with self.lock:
            if key in self.done:
                program.native = self.done[key]
                return
            if key in self.waiting:
                self.waiting[key].append(program)
                return
            self.waiting[key] = [program]
            self.seq += 1
            seq = self.seq
            if not self.started:
                self.started = True
                threading.Thread(target=self._loop, daemon=True,
                                 name="aotgrad-row-native").start()
        self.jobs.put((-seconds, seq, key, program))

    def _loop(self):
        # at the lowest niceness: a step runs on every core, and the steps while a compile
        # took a core from them ran at about half speed; taking only the time they leave,
        # the compiles end later, the steps meanwhile on the row machine, for about the same
        # time to a given step in all. Not in the idle class: there it would share the idle
        # time with the compile helpers' Numba compiles (compile_worker runs them in it),
        # which take longer to pay off than these
        _lowest_priority()
        # the board's row-program functions compiled (or loaded from Numba's cache) here,
        # before the first program is: not in the middle of the step that first runs one
        board.post_rows(board.new_board(), *(0,) * 11)
        board.rows_serial(*(0,) * 11)
        while True:
            _, _, key, program = self.jobs.get()
            native = None
            try:
                # (at exit, the compile in progress ends before the interpreter does, and
                # none starts after: LLVM runs without the interpreter's lock, and a compile
                # still running as the process destroyed LLVM's static state aborted it)
                if tiers.begin_load():
                    try:
                        native = compile_program(program)
                    finally:
                        tiers.end_load()
            except Exception as e:      # the program stays on the row machine: only slower
                log.warning("a row program did not compile natively (%s: %s); it stays on "
                            "the row machine", type(e).__name__, e)
            finally:
                with self.lock:
                    self.done[key] = native
                    for p in self.waiting.pop(key, ()):
                        p.native = native
                self.jobs.task_done()


_compiler = _Compiler()


def request(program, seconds=0.0):
    """Compile `program` in the background (once per program_key; those whose run took
    most `seconds` first); `program.native` is set when it is done."""
    if enabled() and row_lower.supported(program):
        _compiler.submit(program, seconds)


def idle():
    """Is no compile queued or running?"""
    return not _compiler.waiting


def wait():
    """Block until every requested compile has ended (tests)."""
    _compiler.jobs.join()
