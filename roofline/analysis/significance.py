"""Is a difference real?  faster / slower / same / inconclusive, from the samples and their intervals.

How other tools decide: asv's ``is_different`` runs a Mann–Whitney U test on the
raw samples (p < 0.002) when there are enough samples for the test to reach that p at all, else falls back
to non-overlapping 99% intervals, and its ``compare`` reports a change only beyond a factor (1.1);
pyperf's ``compare_to`` uses a two-sample t-test and hides changes under ``--min-speed``; nvbench's
compare script calls a difference "same" when it is within the smaller of the two relative noises.

Here, for two sets of per-launch times: a rank test (Mann–Whitney U, normal approximation with tie
correction, two-sided, ``ALPHA``); then a minimum effect (``MIN_EFFECT``) so that a real but negligible
difference reads "same"; "same" also needs both medians known to better than the minimum effect, otherwise
"inconclusive".  When the samples are too few for any ordering of them to reach ``ALPHA`` (5 against 5,
or 2 against 40) the answer is "inconclusive", not asv's interval fallback: below
``stats.MIN_SAMPLES_FOR_CI`` samples a median's "interval" is the samples' range, which covers the median
only 1 − 2·0.5ⁿ of the time (50% for 2): two such ranges from one machine miss each other in 2 of the 6
orderings of 2 against 2, and a loaded A/A run had them called "slower +77%, significant".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np

from roofline.core.stats import rel_median_ci95_half_width

ALPHA = 0.01
MIN_EFFECT = 0.05


@dataclass(frozen=True)
class Difference:
    verdict: str  # faster | slower | same | inconclusive (for B*: higher | lower | same | inconclusive)
    ratio: float  # other / baseline of the compared quantity
    p_value: float | None  # None: decided from intervals
    test: str
    why: str

    def to_dict(self) -> dict:
        return asdict(self)


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of the Mann–Whitney U test (normal approximation, tie-corrected)."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    n1, n2 = len(x), len(y)
    values = np.concatenate([x, y])
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(1, len(values) + 1)
    unique, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    if len(unique) < len(values):  # average ranks over ties
        sums = np.bincount(inverse, weights=ranks)
        ranks = (sums / counts)[inverse]
    u = ranks[:n1].sum() - n1 * (n1 + 1) / 2
    n = n1 + n2
    tie = float(np.sum(counts**3 - counts)) / (n * (n - 1)) if n > 1 else 0.0
    variance = n1 * n2 / 12 * ((n + 1) - tie)
    if variance <= 0:
        return 1.0
    z = (abs(u - n1 * n2 / 2) - 0.5) / math.sqrt(variance)
    return float(min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2))))


def _smallest_p(n1: int, n2: int) -> float:
    """The smallest p the rank test as computed here can give these sample counts: that of two samples
    completely apart (the normal approximation is conservative for few samples: 5 against 5 cannot reach
    0.01 although the exact test's 2/252 would)."""
    return mann_whitney_p(range(n1), range(n1, n1 + n2))


def compare_samples(baseline_s: Sequence[float], other_s: Sequence[float], min_effect: float = MIN_EFFECT
                    ) -> Difference:
    """Is ``other`` faster or slower than ``baseline`` (times: smaller is faster)?"""
    a, b = list(baseline_s), list(other_s)
    ratio = float(np.median(b) / np.median(a))
    effect = ratio - 1
    if len(a) < 2 or len(b) < 2:
        single = "the baseline has" if len(a) < 2 else "this run has"
        return Difference("inconclusive", ratio, None, "none",
                          f"{single} {min(len(a), len(b))} sample(s): no noise known")
    if _smallest_p(len(a), len(b)) >= ALPHA:
        return Difference("inconclusive", ratio, None, "none",
                          f"{100 * effect:+.1f}%, {len(a)} and {len(b)} samples: too few for the rank test to "
                          f"reach p < {ALPHA:g}")
    noise = max(rel_median_ci95_half_width(a), rel_median_ci95_half_width(b))
    p = mann_whitney_p(a, b)
    return _decide(ratio, effect, noise, p < ALPHA, p, "Mann-Whitney U", min_effect, ("faster", "slower"))


def _decide(ratio, effect, noise, significant, p, test, min_effect, words) -> Difference:
    size = f"{100 * effect:+.1f}%"
    if significant and abs(effect) >= min_effect:
        return Difference(words[0] if effect < 0 else words[1], ratio, p, test,
                          f"{size}, significant ({test}{f', p={p:.2g}' if p is not None else ''})")
    if abs(effect) < min_effect and noise < min_effect:
        return Difference("same", ratio, p, test, f"{size}, under the {100 * min_effect:.0f}% minimum effect")
    return Difference("inconclusive", ratio, p, test,
                      f"{size}, noise ±{100 * noise:.1f}%: not significant at the {100 * min_effect:.0f}% effect")


def discounted_for_busy(difference: Difference, busy: str) -> Difference:
    """``difference`` when one of the two runs was measured on a busy device (``busy`` says which and why): no
    verdict.  Another process's load slows every sample of that run alike, so the test finds it significant
    (a loaded 2-core machine read 3-4x slower than its quiet rerun: "slower, +2546%, significant"), yet it is
    the load that differs, not the device.  The samples' own verdict and effect stay in ``why``."""
    if difference.verdict == "inconclusive":
        return replace(difference, why=f"{difference.why}; and {busy}")
    verdict = "not known to be the same" if difference.verdict == "same" else "not significant"
    return replace(difference, verdict="inconclusive",
                   why=f"{difference.verdict} ({100 * (difference.ratio - 1):+.1f}%), but {busy}: {verdict}")


def compare_intervals(baseline: float | None, baseline_ci: Sequence[float | None], other: float | None,
                      other_ci: Sequence[float | None], higher_is: tuple[str, str], min_effect: float = MIN_EFFECT
                      ) -> Difference | None:
    """A fitted figure (B*, bandwidth, peak) from two fits, decided by its bootstrap intervals.

    ``higher_is``: the words for (other higher, other lower), e.g. ("faster", "slower") or ("higher", "lower").
    """
    if not baseline or not other:
        return None
    ratio = other / baseline
    effect = ratio - 1
    if None in (*baseline_ci, *other_ci):
        return Difference("inconclusive", ratio, None, "none", f"{100 * effect:+.1f}%, an interval is unbounded "
                          "or unknown")
    (alo, ahi), (blo, bhi) = baseline_ci, other_ci
    noise = max((ahi - alo) / 2 / baseline, (bhi - blo) / 2 / other)
    separate = bhi < alo or blo > ahi
    words = (higher_is[1], higher_is[0])  # _decide's first word is for a negative effect
    return _decide(ratio, effect, noise, separate, None, "95% bootstrap intervals", min_effect, words)
