"""The probe's dispatch-key routing (scripts/gpu/torch_shims/dispatch_keys.py), on a real torch op library.

On the GPU machine it gives sglang-kernel's misplaced kernels (under torch 2.11's CPU key) a CUDA entry. Here the
same code routes a toy op's CPU kernel to the Meta key, which a CPU-only machine can call.
"""

import importlib.util
import os

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC = importlib.util.spec_from_file_location(
    "dispatch_keys", os.path.join(ROOT, "scripts", "gpu", "torch_shims", "dispatch_keys.py")
)
dispatch_keys = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(dispatch_keys)


@pytest.fixture(scope="module")
def toy_ops():
    """Namespace ``dflash_keys_test``: ``misplaced`` has a CPU kernel only; ``both`` also has its own Meta one."""
    calls = []
    library = torch.library.Library("dflash_keys_test", "DEF")
    library.define("misplaced(Tensor x) -> Tensor")
    library.define("both(Tensor x) -> Tensor")

    def cpu_kernel(x):
        calls.append(("cpu", x.device.type))
        return x.new_empty(x.shape)

    def meta_kernel(x):
        calls.append(("meta", x.device.type))
        return x.new_empty(x.shape)

    library.impl("misplaced", cpu_kernel, "CPU")
    library.impl("both", cpu_kernel, "CPU")
    library.impl("both", meta_kernel, "Meta")
    yield calls
    del library


def test_routes_only_ops_missing_the_key_and_calls_their_cpu_kernel(toy_ops):
    x = torch.empty(3, 5, device="meta")
    assert dispatch_keys.misplaced("dflash_keys_test", "Meta") == ["dflash_keys_test::misplaced"]
    with pytest.raises(NotImplementedError):
        torch.ops.dflash_keys_test.misplaced(x)

    assert dispatch_keys.route("dflash_keys_test", "Meta") == ["dflash_keys_test::misplaced"]
    toy_ops.clear()
    out = torch.ops.dflash_keys_test.misplaced(x)
    assert out.shape == (3, 5) and toy_ops == [("cpu", "meta")]  # the CPU kernel, with the Meta tensor
    toy_ops.clear()
    torch.ops.dflash_keys_test.both(x)
    assert toy_ops == [("meta", "meta")]  # an op with its own kernel under the key keeps it

    assert dispatch_keys.misplaced("dflash_keys_test", "Meta") == []
    assert dispatch_keys.route("dflash_keys_test", "Meta") == []  # nothing left: a second route is a no-op
