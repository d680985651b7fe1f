"""torch.nn.modules' layout: `from aotgrad.nn.modules.rnn import LSTM` and the like find the
classes where PyTorch has them. Each submodule only re-exports; the classes live in the
modules of aotgrad.nn named after their job."""
from aotgrad.nn.modules.module import Module
from aotgrad.nn.modules.linear import *  # noqa: F401,F403
from aotgrad.nn.modules.conv import *  # noqa: F401,F403
from aotgrad.nn.modules.rnn import *  # noqa: F401,F403
from aotgrad.nn.modules.transformer import *  # noqa: F401,F403
from aotgrad.nn.modules.activation import *  # noqa: F401,F403
from aotgrad.nn.modules.normalization import *  # noqa: F401,F403
from aotgrad.nn.modules.batchnorm import *  # noqa: F401,F403
from aotgrad.nn.modules.instancenorm import *  # noqa: F401,F403
from aotgrad.nn.modules.pooling import *  # noqa: F401,F403
from aotgrad.nn.modules.dropout import *  # noqa: F401,F403
from aotgrad.nn.modules.sparse import *  # noqa: F401,F403
from aotgrad.nn.modules.container import *  # noqa: F401,F403
from aotgrad.nn.modules.loss import *  # noqa: F401,F403
from aotgrad.nn.modules.flatten import *  # noqa: F401,F403
from aotgrad.nn.modules.upsampling import *  # noqa: F401,F403
from aotgrad.nn.modules.pixelshuffle import *  # noqa: F401,F403
