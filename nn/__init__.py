"""`aotgrad.nn`: modules, layers, losses, `functional` and `init`, laid out like torch.nn.

    import aotgrad
    from aotgrad import nn
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    loss = nn.CrossEntropyLoss()(model(x), y)
    loss.backward()

All layers are compositions of aotgrad tensor ops, so they run eagerly with autograd and
are traced by `aotgrad.compile` without special cases.
"""
from aotgrad.nn import functional, init, utils
from aotgrad.nn.activation import (CELU, ELU, GELU, GLU, SELU, Hardshrink, Hardsigmoid, Hardswish,
                                   Hardtanh, LeakyReLU, LogSigmoid, LogSoftmax, Mish, PReLU, ReLU,
                                   ReLU6, RReLU, Sigmoid, SiLU, Softmax, Softmax2d, Softmin,
                                   Softplus, Softshrink, Softsign, Tanh, Tanhshrink, Threshold)
from aotgrad.nn.attention import MultiheadAttention
from aotgrad.nn.container import (ModuleDict, ModuleList, ParameterDict, ParameterList,
                                  Sequential)
from aotgrad.nn.conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d
from aotgrad.nn.dropout import Dropout, Dropout1d, Dropout2d
from aotgrad.nn.instancenorm import InstanceNorm1d, InstanceNorm2d
from aotgrad.nn.linear import Bilinear, Flatten, Identity, Linear, Unflatten
from aotgrad.nn.loss import (BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss, KLDivLoss,
                             L1Loss, MSELoss, NLLLoss, SmoothL1Loss)
from aotgrad.nn.module import Module
from aotgrad.nn.normalization import BatchNorm1d, BatchNorm2d, GroupNorm, LayerNorm, RMSNorm
from aotgrad.nn.parameter import Parameter
from aotgrad.nn.rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase
from aotgrad.nn.transformer import (Transformer, TransformerDecoder, TransformerDecoderLayer,
                                    TransformerEncoder, TransformerEncoderLayer)
from aotgrad.nn.pixelshuffle import PixelShuffle, PixelUnshuffle
from aotgrad.nn.pooling import (AdaptiveAvgPool2d, AdaptiveMaxPool1d, AdaptiveMaxPool2d,
                                AvgPool1d, AvgPool2d, MaxPool1d, MaxPool2d)
from aotgrad.nn.sparse import Embedding, EmbeddingBag
from aotgrad.nn.upsampling import Upsample, UpsamplingBilinear2d, UpsamplingNearest2d

# torch.nn.modules' layout (nn.modules.rnn.LSTM, nn.modules.module.Module, ...)
from aotgrad.nn import modules  # noqa: E402
from aotgrad.nn import parallel  # noqa: E402  (DistributedDataParallel; MPI loads at its use)
from aotgrad.nn.parallel import DataParallel  # noqa: E402

__all__ = [
    "functional", "init", "utils", "modules", "parallel", "Module", "Parameter", "Sequential", "ModuleList",
    "ModuleDict", "ParameterList", "ParameterDict", "Identity", "Linear", "Bilinear", "Flatten",
    "Unflatten",
    "ReLU", "ReLU6", "LeakyReLU", "ELU", "GELU", "SiLU", "Mish", "Softplus", "Hardtanh", "Tanh",
    "Sigmoid", "LogSigmoid", "Softmax", "LogSoftmax", "Softmin", "Threshold", "RReLU",
    "Hardsigmoid", "Hardswish", "CELU", "SELU", "GLU", "Hardshrink", "Softshrink", "PReLU",
    "Softsign", "Tanhshrink", "Softmax2d", "Dropout", "LayerNorm",
    "RMSNorm", "BatchNorm1d", "BatchNorm2d", "Embedding", "Conv1d", "Conv2d", "MaxPool1d",
    "MaxPool2d", "AvgPool1d", "AvgPool2d", "AdaptiveAvgPool2d", "MultiheadAttention", "MSELoss",
    "L1Loss", "SmoothL1Loss", "HuberLoss", "CrossEntropyLoss", "NLLLoss", "BCELoss",
    "BCEWithLogitsLoss", "KLDivLoss",
    "RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell",
    "Transformer", "TransformerEncoder", "TransformerDecoder", "TransformerEncoderLayer",
    "TransformerDecoderLayer", "GroupNorm", "InstanceNorm1d", "InstanceNorm2d", "Conv3d",
    "ConvTranspose1d", "ConvTranspose2d", "Upsample", "UpsamplingNearest2d",
    "UpsamplingBilinear2d", "Dropout1d", "Dropout2d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d",
    "PixelShuffle", "PixelUnshuffle", "EmbeddingBag", "DataParallel",
]
