"""What the plugin does inside SGLang's DFlash worker, written as HookRegistry hooks.

Each function here is an AROUND hook (``hook(original, *args, **kwargs)``) and acts only when the
target is a Gemma 4 model; for every other target it calls ``original`` unchanged. Which hook goes
on which SGLang symbol is decided in ``plan.py``.
"""

from __future__ import annotations

import inspect
import logging

from sglang_gemma4_dflash.compat import registry, runtime, symbols
from sglang_gemma4_dflash.dflash import candidates, sampling_prebuild
from sglang_gemma4_dflash.dflash.draft_sampler import SplitHeadDraftSampler
from sglang_gemma4_dflash.gemma4.capture import check_then_capture, text_model_of
from sglang_gemma4_dflash.gemma4.validate import validate_draft_against_target
from sglang_gemma4_dflash.head.cached import CachedHead, cached_head
from sglang_gemma4_dflash.head.greedy import greedy_token_ids, is_dense_head

logger = logging.getLogger(__name__)


def _is_replicated(lm_head) -> bool:
    """A head without vocab shards: every rank holds all rows (Gemma 4's tied `embed_tokens`)."""
    return getattr(lm_head, "shard_indices", None) is None


def check_draft_at_init(original, self, *args, **kwargs):
    """Around ``DFlashWorker[V2].__init__``: validate the draft against a Gemma 4 target (the target has loaded;
    the draft is loaded by ``original``), compile flashinfer's sampling module while the worker starts
    (``sampling_prebuild``), and log one line saying which of the plugin's pieces run in this worker (on v2, once
    its CUDA graphs are set up: ``report_after_graphs``)."""
    bound = inspect.signature(original).bind(self, *args, **kwargs)
    server_args = bound.arguments["server_args"]
    target_worker = bound.arguments["target_worker"]
    target_model = target_worker.model_runner.model
    if not runtime.is_gemma4_target(target_model):
        return original(self, *args, **kwargs)
    draft_path = server_args.speculative_draft_model_path
    validate_draft_against_target(
        target_worker.model_runner.model_config.hf_config,
        runtime.draft_hf_config(server_args),
        draft_path=draft_path,
        num_draft_tokens=runtime.num_draft_tokens(server_args),
    )
    build = sampling_prebuild.start()
    result = original(self, *args, **kwargs)  # if it raises, the error goes out at once, not after the build
    sampling_prebuild.finish(build)
    self.__dict__[_DRAFT_PATH] = draft_path
    cls = type(self)
    if not registry.hook_in_place(f"{cls.__module__}.{cls.__qualname__}.init_cuda_graphs", report_after_graphs):
        _report(self, target_model)  # v1: the capture and the head are set by now
    return result


_DRAFT_PATH = "_sglang_gemma4_dflash_draft_path"


def report_after_graphs(original, self, *args, **kwargs):
    """Around v2 ``DFlashWorkerV2.init_cuda_graphs`` (0.5.14+): v2 sets the target's capture ids and builds the
    draft's graph sampler after the worker is built, so the line saying which pieces run is logged here."""
    result = original(self, *args, **kwargs)
    if _DRAFT_PATH in self.__dict__:  # set by check_draft_at_init for Gemma 4 targets only
        _report(self, runtime.target_model_of(self))
    return result


def _report(worker, target_model) -> None:
    try:
        logger.info("sglang-gemma4-dflash: %s", pieces_running(worker, target_model, worker.__dict__[_DRAFT_PATH]))
    except Exception as exc:  # a report, never a reason to stop the worker
        logger.warning("sglang-gemma4-dflash: cannot say which pieces run in this worker (%r)", exc)


def pieces_running(worker, target_model, draft_path: str) -> str:
    """One line: which of the plugin's pieces this DFlash worker runs (capture, draft head, checks)."""
    cls = type(target_model)
    method = getattr(cls, "set_dflash_layers_to_capture", None)
    target = f"{cls.__module__}.{cls.__qualname__}.set_dflash_layers_to_capture"
    if getattr(method, "__sglang_gemma4_dflash__", False):
        capture = "the plugin's method"
    elif registry.hook_in_place(target, check_then_capture):
        capture = "upstream's method after the plugin's checks"
    else:
        capture = "upstream's method (the plugin's checks are not in place)"
    try:
        layers = [i - 1 for i in text_model_of(target_model).layers_to_capture]
    except TypeError:
        layers = "?"
    group = runtime.batch_group()
    sampler = worker.__dict__.get("_draft_sampler")
    worker_cls = type(worker)
    head_target = f"{worker_cls.__module__}.{worker_cls.__qualname__}._greedy_sample_from_vocab_parallel_head"
    if isinstance(sampler, SplitHeadDraftSampler):
        head = f"the plugin's split head in the draft CUDA graph over {sampler.layout.tp_size} rank(s)"
    elif sampler is not None:
        head = f"upstream's {type(sampler).__name__} in the draft CUDA graph"
    elif registry.hook_in_place(head_target, greedy_sample):
        head = f"the plugin's exact head, eager, over {int(group.world_size)} rank(s)"
    else:
        head = "upstream's eager head"
    selector = getattr(worker.__dict__.get("draft_model"), "candidate_selector", None)
    if selector is not None:  # a DFlash2 draft walks the top-k candidates of each position
        step = f"{symbols.DFLASH2_DRAFT}.compute_candidates"
        if candidates.serves(getattr(target_model, "lm_head", None)) and registry.hook_in_place(
            step, candidates.compute_candidates
        ):
            head += (
                f"; DFlash2 candidates: the plugin's exact top-{selector.top_k} over {int(group.world_size)} rank(s)"
            )
        else:
            head += "; DFlash2 candidates: upstream's step"
    return (
        f"DFLASH worker {worker_cls.__name__} (rank {int(group.rank_in_group)} of {int(group.world_size)}) for "
        f"{cls.__name__}: start-up checks passed (draft {draft_path}); capture of layers {layers}: {capture}; "
        f"draft head: {head}"
    )


# Keyword arguments of upstream's head that change nothing in its answer (only how it chunks the rows).
HEAD_KWARGS = frozenset({"chunk_size"})


def _head_for(worker, lm_head) -> CachedHead:
    def serves() -> bool:
        return runtime.is_gemma4_target(runtime.target_model_of(worker)) and is_dense_head(lm_head)

    return cached_head(worker, "_sglang_gemma4_dflash_head", lm_head, serves, runtime.batch_group)


def greedy_sample(original, self, *args, **kwargs):
    """Around ``_greedy_sample_from_vocab_parallel_head``: the plugin's exact, TP-synced head for Gemma 4.

    Quantized (non-dense) heads stay with upstream, which has their kernels where it supports them.
    So does any call with arguments the plugin does not know (a fork's ``return_confidence=``, say):
    upstream gets it unchanged. The head is split over ``runtime.batch_group()``: the ranks that share
    the rows (under DP attention, one DP group's attention-TP ranks). The group and the head's layout
    are worked out once per worker.
    """
    hidden_states, lm_head = kwargs.get("hidden_states"), kwargs.get("lm_head")
    if args or hidden_states is None or lm_head is None or set(kwargs) - HEAD_KWARGS - {"hidden_states", "lm_head"}:
        return original(self, *args, **kwargs)
    head = _head_for(self, lm_head)
    if head.layout is None:  # not Gemma 4, or a quantized head
        return original(self, *args, **kwargs)
    return greedy_token_ids(hidden_states, lm_head, head.group, layout=head.layout)


def draft_step_with_replicated_head(original, self, *args, **kwargs):
    """Around v1 ``DFlashWorker._prepare_for_speculative_decoding`` (SGLang 0.5.12-0.5.13).

    The v1 draft step refuses a target ``lm_head`` without ``shard_indices`` before it ever calls
    the head. For the duration of the step a Gemma 4 head answers that check with
    ``shard_indices = None``, which the plugin's head (installed by ``greedy_sample``) reads as
    "replicated: every rank holds the full vocabulary". Nothing else in the step reads it.
    """
    target_model = runtime.target_model_of(self)
    lm_head = getattr(target_model, "lm_head", None)
    if lm_head is None or hasattr(lm_head, "shard_indices") or not runtime.is_gemma4_target(target_model):
        return original(self, *args, **kwargs)
    lm_head.shard_indices = None
    try:
        return original(self, *args, **kwargs)
    finally:
        del lm_head.shard_indices


def record_acceptance(original, self, batch, *args, **kwargs):
    """Around v1 ``DFlashWorker.forward_batch_generation`` (SGLang 0.5.12-0.5.13).

    The v1 verify counts each request's verify steps and accepted drafts but not how many drafts each
    step accepted, so ``meta_info`` carries no ``spec_correct_drafts_histogram`` (the v2 lines fill it).
    After a verify step this adds the step to each request's histogram, through the request's own
    ``update_spec_correct_drafts_histogram``. A request whose histogram already counts every verify
    step (a line that fills it itself) is left alone.
    """
    result = original(self, batch, *args, **kwargs)
    per_req = getattr(result, "num_correct_drafts_per_req_cpu", None)
    reqs = getattr(batch, "reqs", None)
    if not per_req or reqs is None or len(reqs) != len(per_req):
        return result
    if not runtime.is_gemma4_target(runtime.target_model_of(self)):
        return result
    for req, accepted in zip(reqs, per_req):
        update = getattr(req, "update_spec_correct_drafts_histogram", None)
        histogram = getattr(req, "spec_correct_drafts_histogram", None)
        if update is not None and histogram is not None and sum(histogram) < int(getattr(req, "spec_verify_ct", 0)):
            update(int(accepted))
    return result


def build_split_sampler(original, self, *args, **kwargs):
    """Around v2 ``DFlashWorkerV2._maybe_build_draft_sampler`` (SGLang 0.5.16+).

    Upstream's builder runs first, and its sampler (and whatever it sets up) is kept whenever it returns
    one. It returns none for a head without ``shard_indices`` at TP>1 (Gemma 4's tied head), which then
    runs eagerly, scoring the full vocabulary on every rank with no sync. For a Gemma 4 target in that
    case the plugin returns its split sampler: each rank scores 1/tp of the vocabulary inside the draft
    CUDA graph and all ranks pick from the same gathered candidates. Under DP attention the split runs
    over one DP group's ranks (``runtime.batch_group()``); with one rank per group that rank scores the
    whole vocabulary in the graph, with no collective.
    """
    sampler = original(self, *args, **kwargs)
    if sampler is not None:
        return sampler
    target_model = runtime.target_model_of(self)
    lm_head = getattr(target_model, "lm_head", None)
    if (
        lm_head is None
        or not runtime.is_gemma4_target(target_model)
        or not _is_replicated(lm_head)
        or int(runtime.tp_group().world_size) == 1  # at TP=1 upstream keeps it eager for its own reasons
        or not SplitHeadDraftSampler.supports(self, lm_head)
    ):
        return None
    group = runtime.batch_group()
    sampler = SplitHeadDraftSampler.for_worker(self, lm_head, group)
    if int(group.rank_in_group) == 0:
        logger.info(
            "sglang-gemma4-dflash: draft greedy head split over %d rank(s) and folded into the draft cuda graph.",
            int(group.world_size),
        )
    return sampler
