"""A held-out style program: a two-layer graph attention network written for PyTorch (an
accelerator check, FloatTensor/LongTensor, empty(size=...), sparse_coo_tensor, sparse.mm,
an Adam loop), run with only the library module changed: eager and compiled against
PyTorch with the same starting weights."""
import numpy as np
import pytest

from torch_compare import close
from aotgrad.testing import assert_close


def _program(torch, compiled=False, weights=None):
    nn, F = torch.nn, torch.nn.functional
    device = (torch.accelerator.current_accelerator() if torch.accelerator.is_available()
              else torch.device("cpu"))

    class GraphAttentionLayer(nn.Module):
        def __init__(self, in_features, out_features, n_heads, concat=False):
            super().__init__()
            self.n_heads, self.concat = n_heads, concat
            self.n_hidden = out_features // n_heads if concat else out_features
            self.W = nn.Parameter(torch.empty(size=(in_features, self.n_hidden * n_heads)))
            self.a = nn.Parameter(torch.empty(size=(n_heads, 2 * self.n_hidden, 1)))
            self.leakyrelu = nn.LeakyReLU(0.2)
            nn.init.xavier_normal_(self.W)
            nn.init.xavier_normal_(self.a)

        def forward(self, h, adj_mat):
            n_nodes = h.shape[0]
            g = torch.mm(h, self.W).view(n_nodes, self.n_heads, self.n_hidden).permute(1, 0, 2)
            e = torch.matmul(g, self.a[:, :self.n_hidden, :]) + \
                torch.matmul(g, self.a[:, self.n_hidden:, :]).mT
            e = self.leakyrelu(e)
            e = torch.where(adj_mat > 0, e, -9e16 * torch.ones_like(e))
            h_prime = torch.matmul(F.softmax(e, dim=-1), g)
            if self.concat:
                return h_prime.permute(1, 0, 2).contiguous().view(n_nodes, -1)
            return h_prime.mean(dim=0)

    class GAT(nn.Module):
        def __init__(self, in_features, n_hidden, n_heads, num_classes):
            super().__init__()
            self.gat1 = GraphAttentionLayer(in_features, n_hidden, n_heads, concat=True)
            self.gat2 = GraphAttentionLayer(n_hidden, num_classes, 1)

        def forward(self, x, adj_mat):
            return F.log_softmax(self.gat2(F.elu(self.gat1(x, adj_mat)), adj_mat), dim=1)

    rng = np.random.default_rng(0)
    n, fin, classes = 20, 8, 3
    edges = torch.LongTensor(rng.integers(0, n, (2, 60)))
    feats = torch.FloatTensor(rng.random((n, fin)).astype(np.float32))
    labels = torch.LongTensor(rng.integers(0, classes, n))
    sparse_adj = torch.sparse_coo_tensor(edges, torch.ones(60), (n, n))
    adj = sparse_adj.to_dense() + torch.eye(n)
    feats = feats + 0.1 * torch.sparse.mm(sparse_adj, feats)   # one propagation step
    model = GAT(fin, 16, 4, classes).to(device)
    if weights is not None:
        model.load_state_dict({k: torch.tensor(v) for k, v in weights.items()})
    opt = torch.optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4)
    forward = torch.compile(model) if compiled else model
    losses = []
    for _ in range(4):
        opt.zero_grad()
        loss = F.nll_loss(forward(feats, adj), labels)
        loss.backward()
        opt.step()
        losses.append(f"{loss:.4f}")
        losses.append(loss.item())
    return losses, {k: v.detach().numpy() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("compiled", (False, True))
def test_gat_program_matches_torch(torch, compiled):
    import aotgrad
    # the same starting weights in both libraries: PyTorch's, loaded by state_dict
    init = {k: v.numpy().copy() for k, v in _init_weights(torch).items()}
    ref_losses, ref_weights = _program(torch, weights=init)
    losses, weights = _program(aotgrad, compiled=compiled, weights=init)
    assert all(isinstance(s, str) and len(s.split(".")[1]) == 4 for s in losses[0::2])
    assert_close(losses[1::2], ref_losses[1::2], rtol=1e-5, atol=0, equal_nan=True)
    for k in ref_weights:
        close(weights[k], ref_weights[k], k, atol=1e-5, rtol=1e-4)


def _init_weights(torch):
    g = torch.Generator().manual_seed(0)
    return {"gat1.W": torch.randn(8, 16, generator=g) * 0.3,
            "gat1.a": torch.randn(4, 8, 1, generator=g) * 0.3,
            "gat2.W": torch.randn(16, 3, generator=g) * 0.3,
            "gat2.a": torch.randn(1, 6, 1, generator=g) * 0.3}
