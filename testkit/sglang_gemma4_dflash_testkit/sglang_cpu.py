"""Real SGLang Gemma 4 models on CPU, next to the same model in transformers.

Used by the tests and by the main job's capture check. What they need from SGLang, and nothing more:

* ``use_cpu_engine()``: ``SGLANG_USE_CPU_ENGINE=1`` and the ``sgl_kernel`` stand-ins, before anything
  imports SGLang (``conftest.py`` calls it at collection).
* ``init_sglang_groups(rank, world_size, port)``: SGLang's server args published and its distributed and
  model-parallel groups built over gloo, as SGLang's own layer unit tests do (``multiproc`` calls it per rank);
  ``init_tp1()``: the same for this one process, world size 1, once.
* ``tiny_text_config()`` / ``tiny_mm_config()``: small Gemma 4 configs that still have what matters
  (sliding and full attention, per-layer inputs, logit soft-capping, tied embeddings).
* ``build_pair(config)``: a seeded transformers model and the SGLang model of the same class, the
  SGLang one filled through its own ``load_weights`` from the transformers state dict.
* ``prefill(model, prompts)``: one EXTEND batch through the SGLang model with the torch-native
  attention backend and real KV/req-to-token pools; returns last-token logits and, when the model
  captures, the aux hidden states of every token.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

import torch

DTYPE = torch.float32


def sglang_version() -> tuple:
    from importlib.metadata import version

    return tuple(int(part) for part in version("sglang").split(".")[:3])


def softcap_runs_on_cpu() -> bool:
    """SGLang 0.5.13 soft-caps logits only with a Triton kernel (``fused_softcap``), which has no CPU
    driver; 0.5.16 and 0.5.23 use torch.tanh on CPU. 0.5.14/0.5.15 are not checked: treated as 0.5.13."""
    return sglang_version() >= (0, 5, 16)


def cuda_engine_active() -> bool:
    """True where this process drives SGLang's CUDA engine (GPU machines): CPU-engine tests skip there."""
    return torch.cuda.is_available()


def use_cpu_engine() -> None:
    """Select SGLang's CPU engine for this process. Must run before the first ``import sglang``."""
    if cuda_engine_active():
        return
    import sys

    if os.environ.get("SGLANG_USE_CPU_ENGINE") != "1" and any(m.startswith("sglang.") for m in sys.modules):
        raise RuntimeError("SGLang was imported before SGLANG_USE_CPU_ENGINE=1 was set; the CPU engine needs it first.")
    os.environ["SGLANG_USE_CPU_ENGINE"] = "1"
    from sglang_gemma4_dflash_testkit import cpu_standins

    cpu_standins.install()


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (for torch.distributed's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_sglang_groups(
    rank: int = 0, world_size: int = 1, port: int | None = None, extra_args: dict | None = None
) -> None:
    """SGLang's server args published, then its distributed and model-parallel state over gloo: rank ``rank``
    of ``world_size`` (TP = world_size), rendezvous on 127.0.0.1:``port``. Once per process."""
    from sglang.srt.distributed import init_distributed_environment, initialize_model_parallel, parallel_state
    from sglang.srt.server_args import ServerArgs

    extra_args = dict(extra_args or {})
    server_args = ServerArgs(
        model_path="dummy", device="cpu", tp_size=world_size, attention_backend="torch_native", **extra_args
    )
    context = _publish_server_args(server_args, rank)
    if context is None and extra_args:
        raise ValueError(f"server args {sorted(extra_args)} need SGLang's runtime context (0.5.2x)")
    init_distributed_environment(
        world_size=world_size,
        rank=rank,
        local_rank=rank,
        backend="gloo",
        distributed_init_method=f"tcp://127.0.0.1:{port or free_port()}",
    )
    # No custom all-reduce on CPU (as --disable-custom-all-reduce; SGLang would try it and warn at world size > 1).
    parallel_state.set_custom_all_reduce(False)
    if context is None:  # 0.5.11-0.5.16: the widths are arguments
        initialize_model_parallel(tensor_model_parallel_size=world_size, backend="gloo")
    else:  # 0.5.2x: the widths come from the published context, the world group from SGLang's own
        context.get_parallel().override_permanently(world_group=parallel_state._WORLD)
        initialize_model_parallel(backend="gloo")


def destroy_sglang_groups() -> None:
    """Undo ``init_sglang_groups``. This also frees the groups' shared-memory broadcast buffers, which a process
    that just exits leaves behind (Python's resource tracker then warns about leaked shared_memory objects)."""
    from sglang.srt.distributed import destroy_distributed_environment, destroy_model_parallel

    destroy_model_parallel()
    destroy_distributed_environment()


_initialised = False


def init_tp1() -> None:
    """``init_sglang_groups()`` for this process (world size 1) unless done already. Idempotent."""
    global _initialised
    if _initialised:
        return
    from sglang.srt.distributed.parallel_state import model_parallel_is_initialized

    if torch.distributed.is_initialized() or model_parallel_is_initialized():
        raise RuntimeError("torch.distributed is already initialised in this process; init_tp1() must own it.")
    init_sglang_groups()
    _initialised = True


def _publish_server_args(server_args, rank: int = 0):
    """Make ``server_args`` SGLang's current ones: 0.5.2x publishes a runtime context (returned, the module);
    0.5.11-0.5.16 keep one global ServerArgs (returns None)."""
    try:
        from sglang.srt import runtime_context
    except ImportError:
        from sglang.srt.server_args import set_global_server_args_for_scheduler

        set_global_server_args_for_scheduler(server_args)
        return None
    runtime_context.publish(server_args, role="test", ranks=runtime_context.SpawnRanks(world_rank=rank))
    return runtime_context


# --- tiny configs ----------------------------------------------------------------------------------

TEXT_LAYER_TYPES = ["sliding_attention", "full_attention", "sliding_attention", "sliding_attention", "full_attention"]


def tiny_text_config(**overrides):
    """A 5-layer Gemma 4 text config: sliding window 8 (prompts are longer), per-layer inputs,
    soft-capped logits (where SGLang can soft-cap on CPU), tied embeddings. One head_dim for both
    layer types, as SGLang reads a ``gemma4_text`` config as is."""
    from transformers import Gemma4TextConfig

    fields = dict(
        vocab_size=512,
        vocab_size_per_layer_input=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=len(TEXT_LAYER_TYPES),
        layer_types=list(TEXT_LAYER_TYPES),
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        global_head_dim=32,
        hidden_size_per_layer_input=16,
        sliding_window=8,
        final_logit_softcapping=30.0 if softcap_runs_on_cpu() else None,
        tie_word_embeddings=True,
        max_position_embeddings=256,
        architectures=["Gemma4ForCausalLM"],
    )
    fields.update(overrides)
    return Gemma4TextConfig(**fields)


def tiny_mm_config(**text_overrides):
    """A Gemma 4 multimodal config around ``tiny_text_config`` with a 1-layer vision tower and no audio."""
    from transformers import Gemma4Config, Gemma4VisionConfig

    text = tiny_text_config(**text_overrides)
    text.architectures = None
    vision = Gemma4VisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=16,
    )
    return Gemma4Config(
        text_config=text.to_dict(),
        vision_config=vision.to_dict(),
        audio_config=None,
        architectures=["Gemma4ForConditionalGeneration"],
    )


# --- models ----------------------------------------------------------------------------------------


def _classes(config):
    import transformers
    from sglang.srt.models.gemma4_causal import Gemma4ForCausalLM
    from sglang.srt.models.gemma4_mm import Gemma4ForConditionalGeneration

    if config.model_type == "gemma4_text":
        return transformers.Gemma4ForCausalLM, Gemma4ForCausalLM
    if config.model_type == "gemma4":
        return transformers.Gemma4ForConditionalGeneration, Gemma4ForConditionalGeneration
    raise ValueError(f"not a Gemma 4 config: model_type={config.model_type!r}")


def build_pair(config, seed: int = 0):
    """(transformers model, SGLang model) of the same Gemma 4 class with identical weights, float32, eval.

    Dense targets only: SGLang 0.5.23's CPU MoE router (``Gemma4RMSNorm(with_scale=False).forward_native``)
    ignores the router norm's scale, which CUDA and transformers apply, so a MoE target on CPU would
    differ from transformers for a reason that is not the plugin's."""
    import copy

    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if getattr(text, "enable_moe_block", False):
        raise ValueError(
            "build_pair: enable_moe_block=True. SGLang's CPU MoE router ignores the router norm's scale "
            "(CUDA and transformers apply it), so a CPU comparison with transformers would fail for that "
            "reason; compare MoE targets on a GPU, or set `router.norm.with_scale = True` on SGLang's "
            "model and say so in the test."
        )
    init_tp1()
    hf_cls, sgl_cls = _classes(config)
    torch.manual_seed(seed)
    hf_model = hf_cls(copy.deepcopy(config)).to(DTYPE).eval()
    # Seeded init leaves norms at their constant init; perturb every tensor so a swapped or skipped
    # weight changes the output.
    with torch.no_grad():
        gen = torch.Generator().manual_seed(seed + 1)
        for param in hf_model.parameters():
            param.add_(0.05 * torch.randn(param.shape, generator=gen, dtype=param.dtype))

    sgl_model = sgl_cls(copy.deepcopy(config)).to(DTYPE).eval()
    loaded = sgl_model.load_weights(hf_model.state_dict().items())
    missing = set(dict(sgl_model.named_parameters())) - set(loaded)
    if missing:
        raise AssertionError(f"SGLang {sgl_cls.__name__}.load_weights left parameters unloaded: {sorted(missing)}")
    return hf_model, sgl_model


def load_pair(model_dir):
    """(transformers model, SGLang model) of a Gemma 4 checkpoint directory, both float32, eval.

    The SGLang model is filled through its own ``load_weights`` from the transformers state dict."""
    import copy

    from transformers import AutoConfig, AutoModelForCausalLM

    init_tp1()
    config = AutoConfig.from_pretrained(model_dir)
    hf_cls, sgl_cls = _classes(config)
    if config.model_type == "gemma4_text":
        hf_model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=DTYPE).eval()
    else:
        hf_model = hf_cls.from_pretrained(model_dir, dtype=DTYPE).eval()
    sgl_model = sgl_cls(copy.deepcopy(config)).to(DTYPE).eval()
    sgl_model.load_weights(hf_model.state_dict().items())
    return hf_model, sgl_model


def text_config_of(config):
    return config.text_config if config.model_type == "gemma4" else config


# --- prefill ---------------------------------------------------------------------------------------


@dataclass
class Prefill:
    next_token_logits: torch.Tensor  # [batch, vocab], logits of each prompt's last token
    aux_hidden_states: torch.Tensor | None  # [tokens, len(layers) * hidden] (all prompts, concatenated)


def random_prompts(lengths, vocab_size: int, seed: int = 1) -> list[torch.Tensor]:
    """Token ids in [3, vocab) (clear of pad/eos/bos), one prompt per length."""
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab_size, (n,), generator=gen) for n in lengths]


def prefill(model, prompts: list[torch.Tensor]) -> Prefill:
    """Run the prompts as one EXTEND batch (no cached prefix) through an SGLang Gemma 4 model."""
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

    text_config = text_config_of(model.config)
    lengths = [int(p.numel()) for p in prompts]
    batch, context_len = len(prompts), max(lengths)
    req_to_token = ReqToTokenPool(size=batch, max_context_len=context_len, device="cpu", enable_memory_saver=False)
    kv_pool = MHATokenToKVPool(
        size=batch * context_len + 1,  # slot 0 is SGLang's padding slot
        page_size=1,
        dtype=DTYPE,
        head_num=text_config.num_key_value_heads,
        head_dim=text_config.head_dim,
        layer_num=text_config.num_hidden_layers,
        device="cpu",
        enable_memory_saver=False,
        enable_alt_stream=False,
    )
    # The torch-native backend reads exactly these three attributes of its model runner.
    runner = _PoolsOnly(device="cpu", req_to_token_pool=req_to_token, token_to_kv_pool=kv_pool)
    backend = TorchNativeAttnBackend(runner)

    locations, positions = [], []
    for req, n in enumerate(lengths):
        slots = torch.arange(n) + 1 + req * context_len
        req_to_token.req_to_token[req, :n] = slots.to(req_to_token.req_to_token.dtype)
        locations.append(slots)
        positions.append(torch.arange(n))
    seq_lens = torch.tensor(lengths, dtype=torch.int32)
    forward_batch = ForwardBatch(
        forward_mode=ForwardMode.EXTEND,
        batch_size=batch,
        input_ids=torch.cat(prompts).to(torch.int64),
        req_pool_indices=torch.arange(batch, dtype=torch.int64),
        seq_lens=seq_lens,
        seq_lens_cpu=seq_lens.clone(),
        out_cache_loc=torch.cat(locations).to(torch.int64),
        seq_lens_sum=sum(lengths),
        positions=torch.cat(positions).to(torch.int64),
    )
    forward_batch.extend_prefix_lens = torch.zeros(batch, dtype=torch.int32)
    forward_batch.extend_prefix_lens_cpu = [0] * batch
    forward_batch.extend_seq_lens = seq_lens.clone()
    forward_batch.extend_seq_lens_cpu = list(lengths)
    forward_batch.extend_num_tokens = sum(lengths)
    forward_batch.attn_backend = backend
    capturing = bool(getattr(model, "capture_aux_hidden_states", False))
    forward_batch.capture_hidden_mode = CaptureHiddenMode.FULL if capturing else CaptureHiddenMode.NULL

    with torch.no_grad(), forward_context(ForwardContext(attn_backend=backend)):
        backend.init_forward_metadata(forward_batch)
        # Gemma4ForConditionalGeneration shifts positions in place: hand it a copy.
        out = model(forward_batch.input_ids, forward_batch.positions.clone(), forward_batch)
    return Prefill(next_token_logits=out.next_token_logits, aux_hidden_states=out.hidden_states if capturing else None)


@dataclass
class _PoolsOnly:
    device: str
    req_to_token_pool: object
    token_to_kv_pool: object


# --- measured differences, printed at the end of the run (conftest.pytest_terminal_summary) ---------

MEASURED: list[tuple[str, float, float]] = []  # (check, max abs diff, tolerance)


def record(check: str, detail: str, diff: float, tolerance: float) -> None:
    """Note one measured max abs diff of ``check`` (e.g. "Gemma4ForCausalLM logits"); printed per test
    with ``detail`` and summarised per check at the end of the run."""
    MEASURED.append((check, float(diff), float(tolerance)))
    print(f"{check} {detail}: max abs diff {diff:.3g} (atol {tolerance:g})")


# --- transformers reference ------------------------------------------------------------------------


def reference(hf_model, prompt: torch.Tensor):
    """transformers' logits [len, vocab] and hidden states (tuple, [0] = embeddings) for one prompt."""
    with torch.no_grad():
        out = hf_model(input_ids=prompt[None].to(torch.int64), output_hidden_states=True)
    return out.logits[0], [h[0] for h in out.hidden_states]
