"""aotgrad's logging switch.

Every module that has something to say logs to `logging.getLogger(__name__)`, under the
`aotgrad` logger: INFO for traces, recompiles, graph breaks and compile-cache misses, DEBUG
for cache hits and helper-process details, WARNING for failures aotgrad recovers from (a
background or helper-process compile that failed, a cached module that had to be rebuilt).
An application configures these loggers as any other. Without any configuration Python
prints WARNING and above to stderr; the environment variable

    AOTGRAD_LOG=debug | info | warning | error | critical

(read when aotgrad is imported) sets the `aotgrad` logger's level and gives it a handler on
stderr, so `AOTGRAD_LOG=info python train.py` shows what the compiler does. `configure()`
does the same from code.
"""
import logging
import os

ENV = "AOTGRAD_LOG"
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
          "error": logging.ERROR, "critical": logging.CRITICAL}
FORMAT = "[aotgrad %(levelname)s %(name)s] %(message)s"


class _StderrHandler(logging.StreamHandler):
    """The handler `configure` installs (a class of its own, so it is installed once)."""


def configure(level=None):
    """Set the `aotgrad` logger's level to `level` (a name of LEVELS, any case) and give it
    one handler on stderr; `level=None` reads AOTGRAD_LOG and does nothing when it is unset
    or empty. Returns the `aotgrad` logger."""
    logger = logging.getLogger("aotgrad")
    if level is None:
        level = os.environ.get(ENV, "").strip()
        if not level:
            return logger
    name = str(level).strip().lower()
    if name not in LEVELS:
        raise ValueError(f"{ENV}: unknown level {level!r}; choose one of {', '.join(LEVELS)}")
    logger.setLevel(LEVELS[name])
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter(FORMAT))
        logger.addHandler(handler)
    return logger
