"""sglang-kernel built for torch 2.14, run on torch 2.11: its CUDA kernels sit under 2.11's CPU key.

torch 2.14 dropped the `Named` functionality key, so every runtime dispatch key after it moved down by one: the
number an extension built for 2.14 registers as CUDA is 2.11's CPU (and its CPU is 2.11's StartOfDenseBackends).
`route` gives each op of a namespace that has a kernel under CPU and none under CUDA a CUDA kernel that
redispatches to the CPU one: the same compiled code, called with the CUDA tensors it was written for. Catch-all
registrations (no key) need nothing. An install built for its own torch has no such op, so `route` leaves it alone.
"""

import functools

import torch

_LIBRARIES = []  # a Library's registrations last as long as the object


def misplaced(namespace: str, key: str = "CUDA") -> list[str]:
    """The ops of ``namespace`` with a kernel under CPU and none under ``key``."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    return sorted(
        name
        for name in torch._C._dispatch_get_all_op_names()
        if name.startswith(namespace + "::") and has(name, "CPU") and not has(name, key)
    )


def _redispatch(op, keys, *args, **kwargs):
    return op.redispatch(keys, *args, **kwargs)


def route(namespace: str = "sgl_kernel", key: str = "CUDA") -> list[str]:
    """Register, under ``key``, a redispatch to the CPU kernel for each misplaced op; returns their names."""
    names = misplaced(namespace, key)
    if not names:
        return []
    library = torch.library.Library(namespace, "IMPL")
    cpu = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
    for name in names:
        qualified = name.split("::", 1)[1]
        op_name, _, overload = qualified.partition(".")
        op = getattr(getattr(getattr(torch.ops, namespace), op_name), overload or "default")
        library.impl(qualified, functools.partial(_redispatch, op, cpu), key)
    _LIBRARIES.append(library)
    return names
