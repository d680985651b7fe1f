"""torch.nn.modules.sparse's path for classes defined in aotgrad.nn.sparse."""
from aotgrad.nn.sparse import Embedding, EmbeddingBag

__all__ = [
    "Embedding", "EmbeddingBag"
]
