"""Count the operators a piece of torch code dispatches (CPU stand-in for "kernels launched per step").

    with KernelCount() as count:
        sampler(hidden)
    count.kernels      # aten ops that compute or copy (views and metadata ops left out)
    count.collectives  # c10d ops (all-gather, ...)
    count.names        # every counted op, in order

Views (``view``, ``slice``, ``select``, ``permute``, ``_unsafe_view``, ...) and allocations (``empty``) launch
nothing on a GPU and are not counted.
"""

from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode

# Allocations, and ``_unsafe_view`` (a view that torch does not mark as one): no kernel launches.
NOT_KERNELS = frozenset({"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided", "_unsafe_view"})


class KernelCount(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names: list[str] = []
        self.kernels = 0
        self.collectives = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "c10d":
            self.collectives += 1
            self.names.append(f"c10d.{func.overloadpacket.__name__}")
        elif not func.is_view and func.overloadpacket.__name__ not in NOT_KERNELS:
            self.kernels += 1
            self.names.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))
