"""Serve with SGLang's CPU engine on a machine without a GPU: ``python -m sglang.launch_server`` plus
the ``sgl_kernel`` stand-ins, in every process of the server.

    python -m sglang_gemma4_dflash_testkit.cpu_server --model-path <dir> --device cpu [launch_server args]

SGLang's launcher starts its scheduler, tokenizer and detokenizer processes with multiprocessing's
``spawn`` start method. A spawned child imports the parent's ``__main__`` module by name (here
``sglang_gemma4_dflash_testkit.cpu_server``, as ``__mp_main__``) *before* it unpickles its target, and the
target's unpickling is what imports SGLang. So the two lines at module level below run first in the
launcher and in every child: the CPU engine is selected and the stand-ins are in ``sys.modules``
before any SGLang module looks for ``sgl_kernel``. Nothing is written into site-packages and SGLang
is not edited.

Defaults added when the flag is absent:

* ``--device cpu``.
* ``--attention-backend intel_amx``. SGLang 0.5.23 accepts only GPU backends and ``intel_amx`` for
  Gemma 4 (an assert in ``arg_groups/model_hook.py``), and its own post-processing
  (``_attention_backend_platform_fallbacks``) then switches ``intel_amx`` to ``torch_native`` when the
  platform has no AMX kernels; without the real CPU ``sgl_kernel`` (``torch.ops.sgl_kernel
  .convert_weight_packed``) it never has them, so the server runs the torch-native backend; its log
  says "will fallback to torch_native backend".

SGLang sizes the KV cache from free memory (~15 GB on a 24 GB machine): pass ``--max-total-tokens``
when several servers share a machine.
"""

from __future__ import annotations

import os
import runpy
import sys

os.environ["SGLANG_USE_CPU_ENGINE"] = "1"

from sglang_gemma4_dflash_testkit import cpu_standins  # noqa: E402

cpu_standins.install()


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    for flag, value in (("--device", "cpu"), ("--attention-backend", "intel_amx")):
        if flag not in args and not any(a.startswith(flag + "=") for a in args):
            args += [flag, value]
    # Run SGLang's own entry point exactly as `python -m sglang.launch_server` would, but with this
    # module staying `__main__` for the spawned children (runpy does not replace sys.modules["__main__"]
    # unless alter_sys=True; it runs launch_server's code under the name "__main__" in a fresh namespace).
    sys.argv = ["sglang.launch_server", *args]
    runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=False)


if __name__ == "__main__":
    main()
