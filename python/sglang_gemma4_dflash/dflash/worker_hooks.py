"""What the plugin does inside SGLang's DFlash worker, written as HookRegistry hooks.

Each function here is an AROUND hook (``hook(original, *args, **kwargs)``) and acts only when the
target is a Gemma 4 model; for every other target it calls ``original`` unchanged. Which hook goes
on which SGLang symbol is decided in ``hooks.py``.
"""

from __future__ import annotations

import inspect
import logging

from sglang_gemma4_dflash import compat
from sglang_gemma4_dflash.dflash import sampling_prebuild
from sglang_gemma4_dflash.dflash.draft_sampler import SplitHeadDraftSampler
from sglang_gemma4_dflash.gemma4.validate import validate_draft_against_target
from sglang_gemma4_dflash.head.greedy import greedy_token_ids, is_dense_head

logger = logging.getLogger(__name__)


def _is_replicated(lm_head) -> bool:
    """A head without vocab shards: every rank holds all rows (Gemma 4's tied `embed_tokens`)."""
    return getattr(lm_head, "shard_indices", None) is None


def check_draft_at_init(original, self, *args, **kwargs):
    """Around ``DFlashWorker[V2].__init__``: validate the draft against a Gemma 4 target first, and compile
    flashinfer's sampling module while the worker starts (``sampling_prebuild``)."""
    bound = inspect.signature(original).bind(self, *args, **kwargs)
    server_args = bound.arguments["server_args"]
    target_worker = bound.arguments["target_worker"]
    target_model = target_worker.model_runner.model
    if compat.is_gemma4_target(target_model):
        from sglang.srt.utils.hf_transformers.config import get_config

        draft_path = server_args.speculative_draft_model_path
        draft_config = get_config(
            draft_path,
            trust_remote_code=server_args.trust_remote_code,
            revision=getattr(server_args, "speculative_draft_model_revision", None),
        )
        validate_draft_against_target(
            target_worker.model_runner.model_config.hf_config, draft_config, draft_path=draft_path
        )
        build = sampling_prebuild.start()
        result = original(self, *args, **kwargs)  # if it raises, the error goes out at once, not after the build
        sampling_prebuild.finish(build)
        return result
    return original(self, *args, **kwargs)


# Keyword arguments of upstream's head that change nothing in its answer (only how it chunks the rows).
HEAD_KWARGS = frozenset({"chunk_size"})


def greedy_sample(original, self, *args, **kwargs):
    """Around ``_greedy_sample_from_vocab_parallel_head``: the plugin's exact, TP-synced head for Gemma 4.

    Quantized (non-dense) heads stay with upstream, which has their kernels where it supports them.
    So does any call with arguments the plugin does not know (a fork's ``return_confidence=``, say):
    upstream gets it unchanged. The head is split over ``compat.batch_group()``: the ranks that share
    the rows (under DP attention, one DP group's attention-TP ranks).
    """
    hidden_states, lm_head = kwargs.get("hidden_states"), kwargs.get("lm_head")
    if (
        args
        or hidden_states is None
        or lm_head is None
        or set(kwargs) - HEAD_KWARGS - {"hidden_states", "lm_head"}
        or not is_dense_head(lm_head)
        or not compat.is_gemma4_target(compat.target_model_of(self))
    ):
        return original(self, *args, **kwargs)
    return greedy_token_ids(hidden_states, lm_head, compat.batch_group())


def draft_step_with_replicated_head(original, self, *args, **kwargs):
    """Around v1 ``DFlashWorker._prepare_for_speculative_decoding`` (SGLang 0.5.11-0.5.13).

    The v1 draft step refuses a target ``lm_head`` without ``shard_indices`` before it ever calls
    the head. For the duration of the step a Gemma 4 head answers that check with
    ``shard_indices = None``, which the plugin's head (installed by ``greedy_sample``) reads as
    "replicated: every rank holds the full vocabulary". Nothing else in the step reads it.
    """
    target_model = compat.target_model_of(self)
    lm_head = getattr(target_model, "lm_head", None)
    if lm_head is None or hasattr(lm_head, "shard_indices") or not compat.is_gemma4_target(target_model):
        return original(self, *args, **kwargs)
    lm_head.shard_indices = None
    try:
        return original(self, *args, **kwargs)
    finally:
        del lm_head.shard_indices


def build_split_sampler(original, self, *args, **kwargs):
    """Around v2 ``DFlashWorkerV2._maybe_build_draft_sampler`` (SGLang 0.5.14+).

    Upstream keeps the draft head eager at TP>1 when the head has no ``shard_indices`` and then
    scores the full vocabulary on every rank with no sync. For a Gemma 4 target in that case the
    plugin returns its split sampler: each rank scores 1/tp of the vocabulary inside the draft CUDA
    graph and all ranks pick from the same gathered candidates. Under DP attention the split runs over
    one DP group's ranks (``compat.batch_group()``); with one rank per group upstream's sampler stays.
    """
    target_model = compat.target_model_of(self)
    lm_head = getattr(target_model, "lm_head", None)
    tp_group = compat.batch_group()
    if (
        lm_head is None
        or not compat.is_gemma4_target(target_model)
        or not _is_replicated(lm_head)
        or int(tp_group.world_size) == 1
        or not SplitHeadDraftSampler.supports(self, lm_head)
    ):
        return original(self, *args, **kwargs)
    sampler = SplitHeadDraftSampler.for_worker(self, lm_head, tp_group)
    if int(tp_group.rank_in_group) == 0:
        logger.info(
            "sglang-gemma4-dflash: draft greedy head split over tp=%d ranks and folded into the draft cuda graph.",
            int(tp_group.world_size),
        )
    return sampler
