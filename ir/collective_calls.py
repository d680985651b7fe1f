"""CollectiveCall: a collective (an all-reduce over a group of processes) that a compiled
program runs through a communication library, split in two prims so that the program can
compute while the message travels:

    t1 = prims.collective_start(t0, call=c)   # the operation starts on a copy of t0
    ...                                       # the program computes on
    t2 = prims.collective_wait(t1, call=c)    # t2: the result (t1's array, completed)

`start(x)` returns a new array on which the operation is in flight (x is left alone);
`wait(a)` takes that array, completes the operation and returns it holding the result. The
library side (aotgrad.distributed) makes the two functions; the IR only knows that these
steps talk to other processes: every process must run them in the same order, so passes
neither merge, move nor recompute them.
"""
import dataclasses
import typing


@dataclasses.dataclass(frozen=True, eq=False)   # compared by identity: no two calls merge
class CollectiveCall:
    description: str                  # what it does, for printed graphs and errors
    start: typing.Callable            # array -> the array the operation runs on
    wait: typing.Callable             # that array -> the same array, holding the result

    def __repr__(self):
        return f"CollectiveCall({self.description!r})"
