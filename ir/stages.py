"""Stage history: the graph as the tracer made it and after each pass, with the pass's name
(Thunder keeps every trace with its provenance). `compile(fn, dump=dir)` writes each stage
as a runnable file, so a dump shows what every pass did."""
import dataclasses

from aotgrad.ir.core import Graph
from aotgrad.ir.text import format_graph


@dataclasses.dataclass(frozen=True)
class Stage:
    """One graph of the pipeline: `name` is "trace" for the tracer's graph, else the pass."""
    name: str
    graph: Graph

    def __str__(self):
        return format_graph(self.graph, self.name)


@dataclasses.dataclass(frozen=True)
class StageHistory:
    """The stages in the order they ran; `final` is the last graph."""
    stages: tuple[Stage, ...]

    @property
    def final(self):
        return self.stages[-1].graph

    def names(self):
        return [s.name for s in self.stages]

    def files(self):
        """{file name: printed graph} for a dump: `stage00_trace.py`, `stage01_simplify.py`,
        ... (the printed text, without the printer's import header)."""
        return {f"stage{i:02d}_{s.name}.py": str(s) for i, s in enumerate(self.stages)}

    def __str__(self):
        return "\n".join(f"# ---- stage {i}: {s.name} ----\n{s}"
                         for i, s in enumerate(self.stages))
