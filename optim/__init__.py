"""`aotgrad.optim`: SGD, Adam, AdamW, RMSprop, Adagrad, Adamax, NAdam, RAdam, LBFGS and
learning-rate schedulers, like torch.optim.

    opt = aotgrad.optim.Adam(model.parameters(), lr=1e-3)
    sched = aotgrad.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=100)
    for x, y in data:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        sched.step()
"""
from aotgrad.optim import lr_scheduler
from aotgrad.optim.adagrad import Adagrad
from aotgrad.optim.adam import Adam, AdamW
from aotgrad.optim.adamax import Adamax
from aotgrad.optim.lbfgs import LBFGS
from aotgrad.optim.nadam import NAdam
from aotgrad.optim.optimizer import Optimizer
from aotgrad.optim.radam import RAdam
from aotgrad.optim.rmsprop import RMSprop
from aotgrad.optim.sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam",
           "LBFGS", "lr_scheduler"]
