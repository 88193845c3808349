"""The planted weights of the tiny pair: a target whose greedy rule depends on a key token far back in the
context, and a DFlash draft that predicts the whole block from the anchor, its block offset and the target
features captured at one layer. ``tiny.py`` writes them; ``docs/tiny_checkpoints.md`` explains them.

Hidden lanes (both models share the target's embedding, so they share the lanes):

    0 const   every embedding holds KAPPA here (a bias lane)
    1 mask    the mask token's code
    2 key     the key token's flag
    3, 4      target mode lanes A (key seen) / B (no key), written by layer MODE_LAYER's attention and erased
              by the next layer's MLP: only the output of MODE_LAYER carries them
    5..11     draft: block offset 1..7 (one-hot)
    12        draft: mode (+ key seen, - not)
    13        draft: context flag (set on context features, absent on block tokens)
    14..      token codes (random unit vectors)

Target (greedy): ``next = SUCCESSORS[m][last]``, ``m = 1`` iff the key token occurs anywhere in the context.
Draft: at block offset ``k`` it predicts ``SUCCESSORS[m]^k[anchor]``, ``m`` read from the captured features.
"""

from __future__ import annotations

import math

L_CONST, L_MASK, L_KEY, L_A, L_B = 0, 1, 2, 3, 4
L_POS = 5  # L_POS + k - 1 for block offset k = 1..7
L_DMODE, L_CTX = 12, 13
L_CODE = 14  # first code lane
MAX_OFFSETS = 7

KAPPA = 0.5  # const lane of every embedding
MODE_LAYER = 5  # full-attention layer that finds the key; its output is what the draft reads
MODE_SCORE = 13.0  # target: +-score of key / other positions in the mode head
BETA_T, THETA_T = 1.5, 1.65  # target lookup: gate sharpness, threshold (code match 1 + mode match 1 = 2)
NOISE_NORM_WEIGHT = 0.12  # post-norm weight of the random "context noise" parts
BETA_D, THETA_D = 2.9, 2.6  # draft lookup: code 1 + offset 1 + mode 1 = 3
DRAFT_SCORE = 250.0  # draft position heads: anchor score at the matching offset
POS_PAIR = 1  # RoPE pair of the position heads: 1e6 ** (-1 / 32) = 0.649 rad per position
# Pairs 28-31 turn < 6e-6 rad per position (< 0.03 rad over 4096 positions): position-blind lanes. q_norm / k_norm
# weights are per lane and shared by all heads, so each head kind uses its own lanes.
COPY_LANE, POS_LANE, MODE_LANE, MODE_FLAG_LANE = 31, 29, 30, 28
GAIN_COPY, GAIN_POS, GAIN_MODE = 4.0, 8.0, 5.0
DRAFT_OUT = 30.0
INIT_STD = 0.02


def cycle_tokens(spec) -> list[int]:
    """Tokens greedy decoding walks: the ordinary tokens except the key."""
    return [t for t in range(spec.num_special_tokens, spec.vocab_size) if t != spec.key_token_id]


def successor_maps(seed: int, spec) -> tuple[list[int], list[int]]:
    """Two maps, each one cycle through ``cycle_tokens``; special tokens and the key lead into the cycle."""
    import torch

    cycle = cycle_tokens(spec)
    maps = []
    for mode in (0, 1):
        gen = torch.Generator().manual_seed(1000 + 10 * seed + mode)
        order = [cycle[i] for i in torch.randperm(len(cycle), generator=gen).tolist()]
        successor = [0] * spec.vocab_size
        for i, token in enumerate(order):
            successor[token] = order[(i + 1) % len(order)]
        for j, other in enumerate(t for t in range(spec.vocab_size) if t not in set(cycle)):
            successor[other] = order[(7 * j + 3) % len(order)]
        maps.append(successor)
    return maps[0], maps[1]


def mode_of(ids, spec) -> int:
    return int(spec.key_token_id in [int(t) for t in ids])


def token_codes(seed: int, spec):
    """[vocab, hidden] unit codes in lanes L_CODE..; the mask token's code is e_mask."""
    import torch

    gen = torch.Generator().manual_seed(2000 + seed)
    codes = torch.zeros(spec.vocab_size, spec.hidden_size)
    codes[:, L_CODE:] = torch.randn(spec.vocab_size, spec.hidden_size - L_CODE, generator=gen)
    codes[spec.mask_token_id] = 0.0
    codes = codes / codes.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    codes[spec.mask_token_id, L_MASK] = 1.0
    return codes


def embedding(seed: int, spec):
    embed = token_codes(seed, spec)
    embed[:, L_CONST] = KAPPA
    embed[spec.key_token_id, L_KEY] = 1.0
    return embed


# --------------------------------------------------------------------------- target


def plant_target(w: dict, seed: int, spec) -> None:
    """Overwrite the planted parts of the random text weights ``w`` (HF names) in place."""
    import torch

    h, hd, inter = spec.hidden_size, spec.head_dim, spec.intermediate_size
    codes = token_codes(seed, spec)
    maps = successor_maps(seed, spec)
    vocab = spec.vocab_size
    if inter < 2 * vocab:
        raise ValueError("the keyed lookup needs intermediate_size >= 2 * vocab_size")
    if spec.layer_types[MODE_LAYER] != "full_attention":
        raise ValueError(f"layer {MODE_LAYER} must be full attention (it finds the key anywhere in the context)")
    w["model.embed_tokens.weight"] = embedding(seed, spec)

    for n in range(spec.num_hidden_layers):
        p = f"model.layers.{n}."
        for norm in ("post_attention_layernorm", "post_feedforward_layernorm", "post_per_layer_input_norm"):
            w[p + norm + ".weight"] = torch.full((h,), NOISE_NORM_WEIGHT)

    # MODE_LAYER attention, head 0 only: every position scores +MODE_SCORE on key tokens, -MODE_SCORE on the rest,
    # in a lane proportional RoPE leaves unrotated; the value says "key" (-> A) or "not key" (-> B).
    p = f"model.layers.{MODE_LAYER}.self_attn."
    lane = hd // 2 - 1  # not rotated by proportional RoPE (only the first quarter of the pairs turn)
    q, k, v = (torch.zeros_like(w[p + x + "_proj.weight"]) for x in "qkv")
    q[lane, L_CONST] = 1.0
    k[lane, L_KEY], k[lane, L_CONST] = 1.0, -0.5 / KAPPA
    v[0, L_KEY], v[0, L_CONST] = 1.0, -0.5 / KAPPA  # +1 on the key, -1 elsewhere; v_norm keeps the sign
    v[1] = -v[0]
    o = torch.zeros_like(w[p + "o_proj.weight"])
    o[L_A, 0], o[L_B, 1] = 1.0, 1.0
    w[p + "q_proj.weight"], w[p + "k_proj.weight"], w[p + "v_proj.weight"], w[p + "o_proj.weight"] = q, k, v, o
    qk = math.sqrt(MODE_SCORE) / math.sqrt(hd)  # q, k normed to sqrt(hd) * weight; scaling 1
    w[p + "q_norm.weight"], w[p + "k_norm.weight"] = torch.full((hd,), qk), torch.full((hd,), qk)
    # normed output: (A, B) = +-(1, -1) * KAPPA * sqrt(h / 2), so A - B = +-sqrt(2) * (const lane)
    w[f"model.layers.{MODE_LAYER}.post_attention_layernorm.weight"] = torch.full((h,), 0.5)

    # MODE_LAYER MLP: row (t, m) fires iff the code is t's and the mode is m; it swaps code[t] for
    # code[SUCCESSORS[m][t]]. Raw lanes (units of sqrt(h)): code 1, A - B +-sqrt(2) * KAPPA, const KAPPA.
    gate, up, down = torch.zeros(inter, h), torch.zeros(inter, h), torch.zeros(h, inter)
    for m in (0, 1):
        sign = 1.0 if m else -1.0
        rows = slice(m * vocab, (m + 1) * vocab)
        gate[rows] = BETA_T * codes
        mode_weight = 1.0 / (math.sqrt(2.0) * KAPPA)
        gate[rows, L_A], gate[rows, L_B] = BETA_T * sign * mode_weight, -BETA_T * sign * mode_weight
        gate[rows, L_CONST] = -BETA_T * THETA_T / KAPPA
        up[rows, L_CONST] = 1.0 / (KAPPA * 8.0)
        down[:, rows] = (codes[torch.tensor(maps[m])] - codes).T
    gate[[spec.mask_token_id, vocab + spec.mask_token_id]] = 0.0
    for row in (spec.mask_token_id, vocab + spec.mask_token_id):
        gate[row, L_CONST] = -10.0
        down[:, row] = 0.0
    p = f"model.layers.{MODE_LAYER}."
    w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"], w[p + "mlp.down_proj.weight"] = gate, up, down
    # one row fires; the norm scales code[next] - code[t] (norm ~sqrt 2) so that it cancels code[t]
    w[p + "post_feedforward_layernorm.weight"] = torch.full((h,), math.sqrt(2.0))

    # Next layer's MLP erases lanes A and B: output -(A, B) / |(A, B)|, normed back to |(A, B)|.
    p = f"model.layers.{MODE_LAYER + 1}."
    gate, up, down = torch.zeros(inter, h), torch.zeros(inter, h), torch.zeros(h, inter)
    gate[0:2, L_CONST] = 1.0
    up[0, L_A], up[1, L_B] = 1.0, 1.0
    down[L_A, 0], down[L_B, 1] = -1.0, -1.0
    w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"], w[p + "mlp.down_proj.weight"] = gate, up, down
    w[p + "post_feedforward_layernorm.weight"] = torch.full((h,), 0.5)

    final = torch.ones(h)
    final[:L_CODE] = 0.0  # the head scores codes only
    w["model.norm.weight"] = final


# --------------------------------------------------------------------------- draft


def draft_intermediate_size(spec) -> int:
    """One MLP row per (cycle token, offset, mode), padded with zero rows to a multiple of 64.

    SGLang's fused GPU activation kernels (0.5.16's ``activation.cuh``) need the width to be a multiple of
    their vector size; a zero row adds silu(0) * 0 = 0 and changes nothing.
    """
    rows = len(cycle_tokens(spec)) * (spec.block_size - 1) * 2
    return -(-rows // 64) * 64


def draft_weights(seed: int, spec) -> dict:
    """float32 state dict of the one-layer DFlash draft (names as SGLang's DFlashDraftModel loads them)."""
    import torch

    h, hd, heads = spec.hidden_size, spec.draft_head_dim, spec.draft_num_attention_heads
    offsets = spec.block_size - 1
    if offsets > MAX_OFFSETS or heads != 4 + offsets + 1 or 4 * hd != h or spec.draft_num_layers != 1:
        raise ValueError("the planted draft needs 1 layer, 4 copy heads of hidden/4, one head per offset, a mode head")
    codes = token_codes(seed, spec)
    maps = successor_maps(seed, spec)
    slot = list(spec.target_layer_ids).index(MODE_LAYER)

    w = {}
    # Context features -> two lanes: mode (A - B of the MODE_LAYER output) and a context flag (its const lane).
    fc = torch.zeros(h, len(spec.target_layer_ids) * h)
    fc[L_DMODE, slot * h + L_A], fc[L_DMODE, slot * h + L_B] = 1.0, -1.0
    fc[L_CTX, slot * h + L_CONST] = math.sqrt(2.0)  # as large as the mode lane
    w["fc.weight"], w["hidden_norm.weight"] = fc, torch.ones(h)

    # Normalized block inputs: anchor = c (KAPPA e0 + code), mask = c (KAPPA e0 + e1), c = sqrt(h / (1 + KAPPA^2)).
    q, k, v = torch.zeros(heads * hd, h), torch.zeros(heads * hd, h), torch.zeros(heads * hd, h)
    o = torch.zeros(h, heads * hd)
    qk_norm = torch.ones(hd)
    anchor_only = torch.zeros(h)  # > 0 on the anchor, exactly 0 on mask tokens
    anchor_only[L_CONST], anchor_only[L_MASK] = 1.0, -KAPPA
    for c in range(4):  # copy heads: masks attend the anchor only (+-72) and carry its input to the residual
        r = c * hd + COPY_LANE
        q[r, L_MASK] = 1.0
        k[r, L_CONST], k[r, L_MASK], k[r, L_CTX] = 1.0, -2.0 / KAPPA, -1.0
        v[c * hd : (c + 1) * hd] = torch.eye(h)[c * hd : (c + 1) * hd]
        o[c * hd : (c + 1) * hd, c * hd : (c + 1) * hd] = GAIN_COPY * torch.eye(hd)
    freq = 1e6 ** (-2 * POS_PAIR / hd)
    lean = math.cos(freq / 2)  # mask keys score lean * DRAFT_SCORE: between the match (1) and the next offset
    a_hat = 1.0 / math.sqrt(1.0 + lean**2)
    weight = math.sqrt(DRAFT_SCORE * math.sqrt(hd) / (hd * a_hat))  # score = hd * wq * wk * a_hat / sqrt(hd)
    for offset in range(1, offsets + 1):  # position heads: the anchor wins only at its own offset
        base = (4 + offset - 1) * hd
        phase = -offset * freq
        q[base + POS_PAIR, L_MASK] = math.cos(phase)
        q[base + POS_PAIR + hd // 2, L_MASK] = math.sin(phase)
        q[base + POS_LANE, L_MASK] = lean
        k[base + POS_PAIR] = anchor_only
        k[base + POS_LANE, L_MASK], k[base + POS_LANE, L_CTX] = 1.0, -1.0
        v[base] = anchor_only
        o[L_POS + offset - 1, base] = GAIN_POS
    base = (4 + offsets) * hd  # mode head: masks attend the context positions that saw the key, else all context
    q[base + MODE_LANE, L_MASK], q[base + MODE_FLAG_LANE, L_MASK] = 1.0, 0.5
    k[base + MODE_LANE, L_DMODE], k[base + MODE_FLAG_LANE, L_CTX], k[base + MODE_FLAG_LANE, L_CONST] = 1.0, 1.0, -1.0
    v[base, L_DMODE] = 1.0
    o[L_DMODE, base] = GAIN_MODE
    p = "layers.0.self_attn."
    w[p + "q_proj.weight"], w[p + "k_proj.weight"], w[p + "v_proj.weight"], w[p + "o_proj.weight"] = q, k, v, o
    qk_norm[COPY_LANE] = 3.0  # copy heads: +-72
    for lane in (POS_PAIR, POS_PAIR + hd // 2, POS_LANE):
        qk_norm[lane] = weight  # position heads: DRAFT_SCORE
    qk_norm[MODE_LANE], qk_norm[MODE_FLAG_LANE] = 4.0, 4.0  # mode head: 128 * cosine
    w[p + "q_norm.weight"], w[p + "k_norm.weight"] = qk_norm, qk_norm.clone()
    w["layers.0.input_layernorm.weight"] = torch.ones(h)
    w["layers.0.post_attention_layernorm.weight"] = torch.ones(h)

    # MLP: row (t, k, m) fires iff code t, offset k and mode m; it writes code[SUCCESSORS[m]^k[t]].
    # Raw residual at a mask position: const KAPPA*16 + GAIN_COPY*c*KAPPA, code/offset/mode GAIN_COPY*c each.
    cycle = cycle_tokens(spec)
    c = math.sqrt(h / (1.0 + KAPPA**2))
    unit = GAIN_COPY * c
    const = math.sqrt(h) * KAPPA + GAIN_COPY * c * KAPPA
    rows = draft_intermediate_size(spec)
    gate, up, down = torch.zeros(rows, h), torch.zeros(rows, h), torch.zeros(h, rows)
    cycle_ids = torch.tensor(cycle)
    row = 0
    for m in (0, 1):
        successor = torch.tensor(maps[m])
        target = cycle_ids
        for offset in range(1, offsets + 1):
            target = successor[target]  # SUCCESSORS[m]^offset of every cycle token
            rows_ = slice(row, row + len(cycle))
            gate[rows_] = codes[cycle_ids]
            gate[rows_, L_POS + offset - 1] = 1.0
            gate[rows_, L_DMODE] = 1.0 if m else -1.0
            gate[rows_, L_CONST] = -THETA_D * unit / const
            up[rows_, L_CONST] = math.sqrt(h) / const
            down[:, rows_] = DRAFT_OUT * codes[target].T
            row += len(cycle)
    gate *= BETA_D
    p = "layers.0.mlp."
    w[p + "gate_proj.weight"], w[p + "up_proj.weight"], w[p + "down_proj.weight"] = gate, up, down
    final = torch.ones(h)
    final[:L_CODE] = 0.0
    w["norm.weight"] = final
    return w
