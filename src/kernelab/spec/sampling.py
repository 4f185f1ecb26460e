"""Sampling from logits: the exact filtered distribution, in float64.

logits[batch, vocab] (fp32, bf16 or fp16) and per-row parameters (each a scalar or a
tensor[batch]) define, row by row:

1. Cleaning. A NaN logit is -inf (a NaN token can never be drawn). A row holding +inf
   logits gives each of its +inf tokens the same logit 0 and every other token -inf: the
   +inf tokens win and share the draw. A row with no finite or +inf logit has no
   distribution: its probabilities are NaN and its token is -1.
2. temperature T >= 0. T = 0 is greedy: the first index of the row's largest logit, the
   distribution one-hot there. Otherwise e_i = exp((x_i - max x) / T), so max e = 1.
3. top_k k >= 0 (0, or k >= vocab: off). The kept tokens are those whose logit is at least
   the k-th largest logit: ties at the k-th value are all kept, so more than k can survive.
4. top_p p in (0, 1] (1: off), over the top-k survivors renormalised. A token is kept when
   the mass of the survivors strictly above its logit is less than p * M_k (M_k the
   survivors' mass); equivalently, with the survivors sorted by logit, every token at least
   the logit of the first one whose inclusive cumulative mass reaches p * M_k.
5. min_p in [0, 1) (0: off). A token is kept when e_i >= min_p, i.e. its probability is at
   least min_p times the largest probability. Renormalisation scales every probability
   alike, so it does not matter where in the order min-p is applied.
6. Renormalise: probs_i = e_i / sum(kept e) on the kept tokens, 0 elsewhere; a token is
   drawn from probs.

Every filter keeps a top set in logit order, so the kept tokens are {x_i >= t} for the
largest of the three thresholds (min-p's in probability space). Ties are decided on the
logit, exactly; only the top-p and min-p boundaries depend on rounded sums and
exponentials. The inputs drawn here therefore place p and min_p in the middle of a gap of the
float64 cumulative mass (respectively of the distinct e values) at least GAP wide, so a
correct fp32 kernel keeps the very same tokens and the check is elementwise.

The op `sampling_probs` (inputs: logits, temperature fp32[batch], top_k int64[batch], top_p
fp32[batch], min_p fp32[batch]; output fp32 probs[batch, vocab]) is what the registry checks;
a sampler's tokens are judged against these probabilities by tests (support and chi-square).
"""

from __future__ import annotations

from kernelab.spec.op_spec import FLOAT_DTYPES, OpSpec, as_float64, normals

LOGIT_SCALE = 3.0  # logits ~ N(0, 3^2): peaked like a language model's, not flat
GAP = 1e-3  # relative width of the gap each drawn top_p / min_p sits in


def _clean_row(x):
    """float64 row: NaN -> -inf; a row with +inf keeps only its +inf tokens, at logit 0."""
    import torch

    neg_inf = torch.tensor(float("-inf"), dtype=x.dtype, device=x.device)
    x = torch.where(x.isnan(), neg_inf, x)
    if bool((x == float("inf")).any()):
        x = torch.where(x == float("inf"), torch.zeros_like(x), neg_inf)
    return x


def _top_k_floor(x, k: int):
    """The k-th largest logit (-inf when top-k is off)."""
    if k <= 0 or k >= x.numel():
        return float("-inf")
    return float(x.sort(descending=True).values[k - 1])


def _top_p_floor(x, e, floor_k: float, p: float):
    """The logit of the first survivor (by descending logit) whose inclusive mass reaches p."""
    import torch

    if p >= 1.0:
        return float("-inf")
    kept = x >= floor_k
    xs, order = x[kept].sort(descending=True)
    cum = torch.cumsum(e[kept][order], 0)
    reach = torch.nonzero(cum >= p * cum[-1])
    return float(xs[int(reach[0])]) if reach.numel() else float("-inf")


def reference_probs_row(x, temperature: float, top_k: int, top_p: float, min_p: float):
    """One row's filtered distribution, float64 (the module's definition)."""
    import torch

    x = _clean_row(as_float64(x))
    top = float(x.max())
    if top == float("-inf"):
        return torch.full_like(x, float("nan"))
    if temperature == 0.0:
        out = torch.zeros_like(x)
        out[int(torch.nonzero(x == top)[0])] = 1.0
        return out
    e = torch.exp((x - top) / temperature)
    floor = _top_k_floor(x, int(top_k))
    floor = max(floor, _top_p_floor(x, e, floor, float(top_p)))
    kept = (x >= floor) & (e >= float(min_p))
    w = torch.where(kept, e, torch.zeros_like(e))
    return w / w.sum()


def sampling_reference(logits, temperature, top_k, top_p, min_p):
    """probs float64[batch, vocab]; the parameters are tensors[batch] (or scalars)."""
    import torch

    batch = logits.shape[0]
    rows = [
        reference_probs_row(logits[r], *(_at(v, r) for v in (temperature, top_k, top_p, min_p)))
        for r in range(batch)
    ]
    if not rows:
        return torch.empty(logits.shape, dtype=torch.float64, device=logits.device)
    return torch.stack(rows)


def _at(value, row: int):
    import torch

    if isinstance(value, torch.Tensor):
        return value.reshape(-1)[row].item() if value.numel() > 1 else value.item()
    return value


# ---- drawing inputs whose filter boundaries sit in wide gaps --------------------------------


def _uniform(generator, device) -> float:
    import torch

    return float(torch.rand((), generator=generator, device=device))


def _later_half(candidates, generator, device):
    """One of the later half of the candidate boundaries: more tokens survive the filter."""
    half = candidates.numel() // 2
    return candidates[half + int(_uniform(generator, device) * (candidates.numel() - half))]


def top_p_gaps(x, e, floor_k: float):
    """Every top_p halfway between two consecutive cumulative masses of distinct logits (over
    the top-k survivors) whose step is at least GAP of the survivors' mass, ascending."""
    import torch

    kept = x >= floor_k
    values, inverse = torch.unique(x[kept], sorted=True, return_inverse=True)
    mass = torch.zeros_like(values).index_add_(0, inverse, e[kept]).flip(0)
    cum = torch.cumsum(mass, 0) / mass.sum()
    before = torch.cat((cum.new_zeros(1), cum[:-1]))
    wide = (cum - before >= GAP) & (cum <= 1.0 - GAP)
    return ((before + cum) / 2)[wide]


def min_p_gaps(e_kept):
    """Every min_p at the geometric middle of two consecutive distinct e values whose ratio
    is at least 1 + GAP, descending."""
    import torch

    values = torch.unique(e_kept[e_kept > 0], sorted=True).flip(0)
    middles = torch.sqrt(values[:-1] * values[1:])
    return middles[values[:-1] / values[1:] >= 1.0 + GAP]


def safe_top_p(x, temperature: float, top_k: int, near: float) -> float:
    """The top_p in a GAP-wide gap nearest to `near` for a logit row (1.0 when none): a
    boundary no rounding can move, for tests that draw."""
    x = _clean_row(as_float64(x))
    e = (x - x.max()).div(temperature).exp()
    gaps = top_p_gaps(x, e, _top_k_floor(x, top_k))
    return float(gaps[(gaps - near).abs().argmin()]) if gaps.numel() else 1.0


def safe_min_p(x, temperature: float, near: float) -> float:
    """The min_p in a gap (ratio 1 + GAP) nearest to `near` in log space (0.0 when none)."""
    import math

    x = _clean_row(as_float64(x))
    gaps = min_p_gaps((x - x.max()).div(temperature).exp())
    return float(gaps[(gaps.log() - math.log(near)).abs().argmin()]) if gaps.numel() else 0.0


def _gap_top_p(x, e, floor_k: float, generator, device) -> float:
    gaps = top_p_gaps(x, e, floor_k)
    return float(_later_half(gaps, generator, device)) if gaps.numel() else 1.0


def _gap_min_p(e_kept, generator, device) -> float:
    gaps = min_p_gaps(e_kept)
    return float(_later_half(gaps, generator, device)) if gaps.numel() else 0.0


def _make_sampling(shape, torch_dtype, generator, device):
    """Rows cycle through the filters (greedy, top-k, top-p, min-p and mixes), from a drawn
    starting point; temperatures in [0.5, 1.5]."""
    import torch

    batch, vocab = shape["batch"], shape["vocab"]
    logits = normals((batch, vocab), generator, device, LOGIT_SCALE).to(torch_dtype)
    params = {name: [] for name in ("temperature", "top_k", "top_p", "min_p")}
    start = int(_uniform(generator, device) * 8)
    for r in range(batch):
        kind = (start + r) % 8
        t = 0.0 if kind == 7 else 0.5 + _uniform(generator, device)
        k = 0 if kind in (0, 2, 4) else 1 + int(_uniform(generator, device) * min(vocab, 64))
        if kind == 5:
            k = 1 + int(_uniform(generator, device) * vocab)
        x = _clean_row(as_float64(logits[r]))
        e = torch.exp((x - x.max()) / (t or 1.0))
        floor = _top_k_floor(x, k)
        p = _gap_top_p(x, e, floor, generator, device) if kind in (2, 3, 6) else 1.0
        floor = max(floor, _top_p_floor(x, e, floor, p))
        mp = _gap_min_p(e[x >= floor], generator, device) if kind in (4, 6) else 0.0
        for name, value in zip(params, (t, k, p, mp), strict=True):
            params[name].append(value)

    def column(name, dtype):
        return torch.tensor(params[name], dtype=dtype, device=device)

    return (logits, column("temperature", torch.float32), column("top_k", torch.int64),
            column("top_p", torch.float32), column("min_p", torch.float32))  # fmt: skip


def eager_sampling_probs(logits, temperature, top_k, top_p, min_p):
    """torch's sort-based filtering in fp32 (softmax, sort, cumsum, mask), the baseline; the
    greedy and degenerate rows follow the definition above."""
    import torch

    x = logits.float()
    x = torch.where(x.isnan(), float("-inf"), x)
    inf_row = (x == float("inf")).any(dim=1, keepdim=True)
    x = torch.where(inf_row, torch.where(x == float("inf"), 0.0, float("-inf")), x)
    t = temperature.float().reshape(-1, 1)
    greedy = t == 0
    probs = torch.softmax(x / torch.where(greedy, 1.0, t), dim=-1)
    sorted_x, order = x.sort(dim=-1, descending=True)
    sorted_probs = probs.gather(1, order)
    vocab = x.shape[1]
    k = top_k.reshape(-1, 1)
    use_k = (k > 0) & (k < vocab)
    floor_k = sorted_x.gather(1, (k.clamp(1, vocab) - 1))
    floor_k = torch.where(use_k, floor_k, float("-inf"))
    sorted_probs = torch.where(sorted_x >= floor_k, sorted_probs, 0.0)
    cum = sorted_probs.cumsum(dim=-1)
    reach = (cum >= top_p.float().reshape(-1, 1) * cum[:, -1:]).int().argmax(dim=-1, keepdim=True)
    floor_p = torch.where(top_p.reshape(-1, 1) < 1, sorted_x.gather(1, reach), float("-inf"))
    kept = (x >= torch.maximum(floor_k, floor_p)) & (
        probs >= min_p.reshape(-1, 1) * probs.amax(1, keepdim=True)
    )
    w = torch.where(kept, probs, 0.0)
    out = w / w.sum(dim=-1, keepdim=True)
    one_hot = torch.zeros_like(out).scatter_(1, x.argmax(dim=-1, keepdim=True), 1.0)
    out = torch.where(greedy, one_hot, out)
    return torch.where(x.amax(1, keepdim=True) == float("-inf"), float("nan"), out)


def _sampling_cost(shape, dtype):
    from kernelab.roofline import costs

    return costs.sampling_probs(shape["batch"], shape["vocab"], dtype=dtype)


SAMPLING_OPS: dict[str, OpSpec] = {
    "sampling_probs": OpSpec(
        "sampling_probs", ("batch", "vocab"), FLOAT_DTYPES,
        "temperature, top-k, top-p, min-p filtered distribution of logits[batch, vocab]",
        _make_sampling, sampling_reference, eager_sampling_probs, _sampling_cost,
        output_dtype="fp32",
    ),
}  # fmt: skip
