"""torch.nn.modules.transformer's path for classes defined in aotgrad.nn.transformer."""
from aotgrad.nn.transformer import (Transformer, TransformerEncoder, TransformerDecoder,
                                    TransformerEncoderLayer, TransformerDecoderLayer)

__all__ = [
    "Transformer", "TransformerEncoder", "TransformerDecoder", "TransformerEncoderLayer",
    "TransformerDecoderLayer"
]
