"""PyTorch-style scripts run with only their import lines changed: a word-level LSTM language
model (nn.Embedding + nn.LSTM + nn.Linear, clip_grad_norm_, save/load of state_dicts,
generation under no_grad) and a small CNN trained from a DataLoader and evaluated under
inference_mode. Each runs under torch, aotgrad eager and aotgrad with the training step
compiled; the losses and predictions must agree."""
import io
import textwrap

import numpy as np
import pytest

import aotgrad
from aotgrad.testing import assert_close

# the scripts as a PyTorch user writes them; `compile_step` is the one hook (identity for
# torch and eager, aotgrad.compile for the compiled run)
LSTM_LM = textwrap.dedent('''
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class RNNModel(nn.Module):
        def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.0):
            super().__init__()
            self.drop = nn.Dropout(dropout)
            self.encoder = nn.Embedding(ntoken, ninp)
            self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
            self.decoder = nn.Linear(nhid, ntoken)
            self.nlayers, self.nhid = nlayers, nhid

        def forward(self, input, hidden):
            emb = self.drop(self.encoder(input))
            output, hidden = self.rnn(emb, hidden)
            output = self.drop(output)
            decoded = self.decoder(output).view(-1, self.decoder.out_features)
            return F.log_softmax(decoded, dim=1), hidden

        def init_hidden(self, bsz):
            weight = next(self.parameters())
            return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                    weight.new_zeros(self.nlayers, bsz, self.nhid))

    def repackage_hidden(h):
        if isinstance(h, torch.Tensor):
            return h.detach()
        return tuple(repackage_hidden(v) for v in h)

    model = RNNModel(NTOKEN, 8, 12, 2)
    model.load_state_dict(INIT)
    criterion = nn.NLLLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)

    def step(data, targets, hidden):
        model.zero_grad()
        output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        optimizer.step()
        return loss, hidden

    step = compile_step(step)
    model.train()
    hidden = model.init_hidden(BSZ)
    losses = []
    for epoch in range(2):
        for i in range(0, DATA.size(0) - 1, BPTT):
            data, targets = DATA[i:i + BPTT], DATA[i + 1:i + 1 + BPTT].reshape(-1)
            if data.size(0) != BPTT:
                continue
            hidden = repackage_hidden(hidden)
            loss, hidden = step(data, targets, hidden)
            losses.append(loss.item())

    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    buf.seek(0)
    model2 = RNNModel(NTOKEN, 8, 12, 2)
    model2.load_state_dict(torch.load(buf, weights_only=True))
    model2.eval()
    with torch.no_grad():
        hidden = model2.init_hidden(1)
        input = torch.tensor([[3]], dtype=torch.long)
        words = []
        for _ in range(6):
            output, hidden = model2(input, hidden)
            word = int(output.argmax(dim=1)[0])
            input.fill_(word)
            words.append(word)
    RESULT = losses, words
''')

CNN = textwrap.dedent('''
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
            self.pool = nn.MaxPool2d(2)
            self.conv2 = nn.Conv2d(4, 8, 3)
            self.fc = nn.Linear(8 * 2 * 2, 3)

        def forward(self, x):
            x = self.pool(torch.relu(self.conv1(x)))
            x = torch.relu(self.conv2(x))
            return self.fc(torch.flatten(x, 1))

    model = Net()
    model.load_state_dict(INIT)
    loader = DataLoader(TensorDataset(X, Y), batch_size=8, shuffle=False)
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

    def step(xb, yb):
        optimizer.zero_grad()
        loss = loss_fn(model(xb), yb)
        loss.backward()
        optimizer.step()
        return loss

    step = compile_step(step)
    losses = []
    for epoch in range(3):
        model.train()
        for xb, yb in loader:
            losses.append(step(xb, yb).item())
    model.eval()
    correct = 0
    with torch.inference_mode():
        for xb, yb in loader:
            pred = model(xb)
            correct += (pred.argmax(1) == yb).type(torch.float).sum().item()
    RESULT = losses, correct
''')

# PyTorch's time-sequence example, shortened: two LSTMCells, float64, LBFGS with a closure,
# the data saved and loaded with torch.save, future predictions
SINE = textwrap.dedent('''
    import torch
    import torch.nn as nn
    import torch.optim as optim

    class Sequence(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm1 = nn.LSTMCell(1, 12)
            self.lstm2 = nn.LSTMCell(12, 12)
            self.linear = nn.Linear(12, 1)

        def forward(self, input, future=0):
            outputs = []
            h_t = torch.zeros(input.size(0), 12, dtype=torch.double)
            c_t = torch.zeros(input.size(0), 12, dtype=torch.double)
            h_t2 = torch.zeros(input.size(0), 12, dtype=torch.double)
            c_t2 = torch.zeros(input.size(0), 12, dtype=torch.double)
            for input_t in input.split(1, dim=1):
                h_t, c_t = self.lstm1(input_t, (h_t, c_t))
                h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
                output = self.linear(h_t2)
                outputs += [output]
            for i in range(future):
                h_t, c_t = self.lstm1(output, (h_t, c_t))
                h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
                output = self.linear(h_t2)
                outputs += [output]
            return torch.cat(outputs, dim=1)

    buf = io.BytesIO()
    torch.save(WAVES, buf)
    buf.seek(0)
    data = torch.load(buf)
    input, target = data[3:, :-1], data[3:, 1:]
    test_input, test_target = data[:3, :-1], data[:3, 1:]
    seq = Sequence().double()
    seq.load_state_dict(INIT)
    criterion = nn.MSELoss()
    optimizer = optim.LBFGS(seq.parameters(), lr=0.8, max_iter=6)

    def closure():
        optimizer.zero_grad()
        out = seq(input)
        loss = criterion(out, target)
        loss.backward()
        return loss

    closure = compile_step(closure)
    losses = []
    for i in range(2):
        losses.append(optimizer.step(closure).item())
    with torch.no_grad():
        pred = seq(test_input, future=4)
        losses.append(criterion(pred[:, :-4], test_target).item())
    RESULT = losses, pred.numpy().tolist()
''')


def _run(source, lib, compile_step, data):
    if lib is aotgrad:  # the only change: the import lines
        source = source.replace("import torch.nn.functional as F",
                                "import aotgrad.nn.functional as F")
        source = source.replace("import torch.nn as nn", "import aotgrad.nn as nn")
        source = source.replace("from torch.utils.data import", "from aotgrad.utils.data import")
        source = source.replace("from torch import nn", "from aotgrad import nn")
        source = source.replace("import torch.optim as optim", "import aotgrad.optim as optim")
        source = source.replace("import torch\n", "import aotgrad as torch\n")
    scope = {"io": io, "compile_step": compile_step}
    for k, v in data.items():
        if isinstance(v, dict):
            scope[k] = {n: lib.tensor(a) for n, a in v.items()}
        elif isinstance(v, np.ndarray):
            scope[k] = lib.tensor(v)
        else:
            scope[k] = v
    exec(compile(source, "<script>", "exec"), scope)
    return scope["RESULT"]


def _init(torch, build):
    torch.manual_seed(0)
    return {k: v.detach().numpy().copy() for k, v in build().state_dict().items()}


# compiled: the whole step in one program (a graph break raises); the Numba build of these
# programs takes half a minute, so it runs with the slow tests
MODES = {"eager": lambda f: f,
         "interpret": lambda f: aotgrad.compile(f, fullgraph=True, backend="interpret"),
         "numba": lambda f: aotgrad.compile(f, fullgraph=True)}
MODE_PARAMS = ["eager", "interpret", pytest.param("numba", marks=pytest.mark.slow)]


@pytest.mark.parametrize("mode", MODE_PARAMS)
def test_lstm_language_model_script(torch, mode):
    ns = {}
    exec(compile(LSTM_LM.split("model = RNNModel")[0], "<defs>", "exec"), ns)
    ntoken, bsz, bptt = 11, 3, 5
    init = _init(torch, lambda: ns["RNNModel"](ntoken, 8, 12, 2))
    rng = np.random.default_rng(0)
    data = {"NTOKEN": ntoken, "BSZ": bsz, "BPTT": bptt, "INIT": init,
            "DATA": rng.integers(0, ntoken, (21, bsz))}
    want = _run(LSTM_LM, torch, lambda f: f, data)
    got = _run(LSTM_LM, aotgrad, MODES[mode], data)
    assert_close(got[0], want[0], rtol=2e-4, atol=1e-5, equal_nan=True)
    assert got[1] == want[1]


@pytest.mark.parametrize("mode", MODE_PARAMS)
def test_cnn_dataloader_inference_mode_script(torch, mode):
    ns = {}
    exec(compile(CNN.split("model = Net()")[0], "<defs>", "exec"), ns)
    init = _init(torch, ns["Net"])
    rng = np.random.default_rng(1)
    data = {"INIT": init, "X": rng.normal(size=(24, 1, 8, 8)).astype(np.float32),
            "Y": rng.integers(0, 3, 24)}
    want = _run(CNN, torch, lambda f: f, data)
    got = _run(CNN, aotgrad, MODES[mode], data)
    assert_close(got[0], want[0], rtol=2e-4, atol=1e-5, equal_nan=True)
    assert got[1] == want[1]


@pytest.mark.parametrize("mode", MODE_PARAMS)
def test_sine_wave_lstmcell_lbfgs_script(torch, mode):
    ns = {}
    exec(compile(SINE.split("buf = io.BytesIO()")[0], "<defs>", "exec"), ns)
    init = _init(torch, lambda: ns["Sequence"]().double())
    rng = np.random.default_rng(2)
    t = np.arange(12) + rng.integers(-8, 8, (7, 1))
    data = {"INIT": init, "WAVES": np.sin(t / 3.0)}
    want = _run(SINE, torch, lambda f: f, data)
    got = _run(SINE, aotgrad, MODES[mode], data)
    assert_close(got[0], want[0], rtol=1e-9, atol=0, equal_nan=True)
    assert_close(got[1], want[1], rtol=1e-9, atol=1e-12, equal_nan=True)
