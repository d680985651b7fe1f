"""torch.nn.modules.rnn's path for classes defined in aotgrad.nn.rnn."""
from aotgrad.nn.rnn import RNNBase, RNN, LSTM, GRU, RNNCellBase, RNNCell, LSTMCell, GRUCell

__all__ = [
    "RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"
]
