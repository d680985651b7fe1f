"""`aotgrad.cpu.amp.autocast(dtype=...)`: the older spelling of
`aotgrad.autocast("cpu", dtype=...)` (bfloat16 by default)."""
from aotgrad.runtime.autocast import autocast as _autocast


class autocast(_autocast):  # noqa: N801
    def __init__(self, enabled=True, dtype=None, cache_enabled=True):
        super().__init__("cpu", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
