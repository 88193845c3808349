"""The draft head on a CUDA device: the eager head and the graph-captured split sampler.

Marked ``gpu`` and skipped without a GPU (CI has none); run on a GPU machine with `python -m pytest -q -m gpu`.
The oracle is a full-vocabulary argmax of fp32-accumulated logits rounded to the weight dtype, with
planted exact ties (lowest id wins).
"""

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none on this machine)"),
]


def _head(vocab, hidden, dtype, seed=0):
    gen = torch.Generator(device="cpu").manual_seed(seed)
    weight = (0.02 * torch.randn(vocab, hidden, generator=gen)).to(dtype)
    weight[vocab - 3] = weight[vocab // 2]  # an exact tie between two far-apart rows
    return weight.cuda()


def _oracle(hs, weight):
    logits = (hs.float() @ weight.float().T).to(weight.dtype)
    return torch.argmax(logits, dim=-1)


@pytest.mark.parametrize("tokens", [1, 15, 60, 240, 700])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_eager_head_on_cuda_matches_full_vocab_argmax(tokens, dtype):
    from sglang_gemma4_dflash.head.greedy import greedy_token_ids

    weight = _head(4099, 320, dtype)
    hs = torch.randn(tokens, 320, device="cuda").to(dtype)
    hs[0] = weight[4099 // 2] * 50  # row 2049 and its copy 4096 tie: 2049 must win
    got = greedy_token_ids(hs, torch.nn.Embedding.from_pretrained(weight), None)
    want = _oracle(hs, weight)
    assert int(got[0]) == 4099 // 2
    near = (got != want).nonzero().flatten()
    if near.numel():  # only sub-ulp near-ties may break differently from the fp32 oracle
        logits = hs.float() @ weight.float().T
        gap = (logits[near, want[near]] - logits[near, got[near]]).abs()
        assert float(gap.max()) <= 1e-2 * float(logits[near].abs().max()), near.tolist()


def test_split_sampler_replays_in_a_cuda_graph():
    from sglang_gemma4_dflash.dflash.draft_sampler import SplitHeadDraftSampler

    block, max_bs = 8, 4
    weight = _head(3001, 256, torch.bfloat16, seed=1)
    head = torch.nn.Embedding.from_pretrained(weight)
    sampler = SplitHeadDraftSampler(head, block_size=block, max_bs=max_bs, tp_group=None)
    static_hs = torch.zeros(max_bs * block, 256, device="cuda", dtype=torch.bfloat16)
    with torch.inference_mode():
        sampler(static_hs)  # warm-up outside the graph (kernel compile)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            sampler(static_hs)
        for seed in range(3):
            gen = torch.Generator(device="cpu").manual_seed(seed)
            static_hs.copy_(torch.randn(max_bs * block, 256, generator=gen).to(torch.bfloat16))
            graph.replay()
            torch.cuda.synchronize()
            draft_rows = static_hs.view(max_bs, block, -1)[:, 1:, :].reshape(-1, 256)
            want = _oracle(draft_rows, weight)
            got = sampler.out[: max_bs * (block - 1)]
            assert (got == want).float().mean() > 0.99, (got != want).nonzero().flatten().tolist()


def _nan_inputs(vocab, hidden, dtype):
    """Finite maximum at id 7; NaN logits at ids vocab // 2 and vocab - 5 (past the first vocabulary block);
    the last row NaN throughout. torch.argmax counts NaN as the largest, lowest id first."""
    weight = torch.zeros(vocab, hidden, dtype=dtype, device="cuda")
    weight[7, 0] = 1.0
    weight[vocab // 2, 1] = weight[vocab - 5, 1] = float("nan")
    hs = torch.zeros(4, hidden, dtype=dtype, device="cuda")
    hs[:, 0] = 1.0
    hs[-1] = float("nan")
    return weight, hs


@pytest.mark.parametrize("vocab", [4099, 262144])  # 262144: Gemma 4's vocabulary
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_nan_logits_on_cuda_follow_torch_argmax(vocab, dtype):
    from sglang_gemma4_dflash.head.greedy import greedy_token_ids

    weight, hs = _nan_inputs(vocab, 256, dtype)
    got = greedy_token_ids(hs, torch.nn.Embedding.from_pretrained(weight), None, budget_bytes=1)
    assert got.tolist() == _oracle(hs, weight).tolist() == [vocab // 2] * 3 + [0]
    assert bool(((got >= 0) & (got < vocab)).all())


def test_nan_logits_in_the_split_sampler_cuda_graph_follow_torch_argmax():
    from sglang_gemma4_dflash.dflash.draft_sampler import SplitHeadDraftSampler

    vocab, block = 262144, 2
    weight, hs = _nan_inputs(vocab, 256, torch.bfloat16)
    sampler = SplitHeadDraftSampler(torch.nn.Embedding.from_pretrained(weight), block_size=block, max_bs=2)
    static_hs = torch.zeros_like(hs)
    with torch.inference_mode():
        sampler(static_hs)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            sampler(static_hs)
        static_hs.copy_(hs)
        graph.replay()
        torch.cuda.synchronize()
    assert sampler.out.tolist() == [vocab // 2, 0]  # drafted rows 1 and 3 (the NaN row)
