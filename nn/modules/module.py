"""torch.nn.modules.module's path: Module and the global module hook registrars, defined in
aotgrad.nn.module."""
from aotgrad.nn.module import *  # noqa: F401,F403
from aotgrad.nn.module import __all__  # noqa: F401
