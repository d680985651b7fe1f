"""The version counter a tensor shares with its views and detached aliases: in-place ops bump
it, and a tensor saved for backward remembers its value to detect a later modification."""

class VersionCounter:
    """Shared by a tensor, its views and detached aliases; bumped by every in-place op.
    (No __init__: `v` reads the class default until the first bump, and making one, which
    every new tensor does, costs a third less.)

    `t._version_counter` is this shared counter; `t._version` is its current value, an int
    as in PyTorch. (`int(counter)` and `counter == 2` read the current value too.)"""
    v = 0

    def __int__(self):
        return self.v

    __index__ = __int__

    def __eq__(self, other):
        if isinstance(other, VersionCounter):
            return self is other
        return self.v == other

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = object.__hash__

    def __lt__(self, other):
        return self.v < int(other)

    def __le__(self, other):
        return self.v <= int(other)

    def __gt__(self, other):
        return self.v > int(other)

    def __ge__(self, other):
        return self.v >= int(other)

    def __add__(self, other):
        return self.v + int(other)

    __radd__ = __add__

    def __sub__(self, other):
        return self.v - int(other)

    def __rsub__(self, other):
        return int(other) - self.v

    def __repr__(self):
        return repr(self.v)
