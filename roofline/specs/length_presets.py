"""Named length distributions fitted to a published dataset's lengths: ``--prompt sharegpt --output sharegpt``.

A preset is a quantile table (the empirical inverse CDF at fixed percentiles) of one published trace's prompt and
output lengths, as ``scripts/fit_length_preset.py`` computes it from the trace's file; a draw picks a percentile
uniformly and interpolates the length between the table's neighbours in log space. A table, not a log-normal:
ShareGPT's prompt lengths spread over three orders of magnitude (10th percentile 74 tokens, 90th 5,696), and the
trace is cut at 8,192 tokens a request and 1,024 an answer: on ShareGPT the maximum-likelihood log-normal puts the
99th-percentile prompt at 48,844 tokens (the data: 7,434), a Kolmogorov-Smirnov distance of 0.12 against the
table's 0.005 (the script prints both). Prompt and output are drawn independently: their log lengths correlate at
0.06 in the trace (``--lengths FILE.csv`` keeps each pair as the data had it)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: the percentiles every table gives a length at (the ends are the trace's smallest and largest length)
PERCENTILES = (0.0, 0.5, 1.0, 2.5, 5.0, 7.5, 10.0, 15.0, 20.0, 25.0, 30.0, 35.0, 40.0, 45.0, 50.0, 55.0, 60.0,
               65.0, 70.0, 75.0, 80.0, 85.0, 90.0, 92.5, 95.0, 97.5, 99.0, 99.5, 100.0)


@dataclass(frozen=True)
class LengthPreset:
    """One trace's prompt and output lengths, as quantiles at ``PERCENTILES``, and where they come from."""

    name: str
    source: str
    prompt: tuple[int, ...]
    output: tuple[int, ...]
    #: the trace's cut on prompt + output tokens: a pair drawn past it is drawn again (both roles from the preset)
    max_total: int | None = None

    def quantiles(self, role: str) -> tuple[int, ...]:
        return self.prompt if role == "prompt" else self.output

    def sample(self, role: str, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` lengths of ``role`` (``prompt`` or ``output``): a uniform percentile each, its length
        interpolated between the table's neighbours in log space."""
        logs = np.log(np.asarray(self.quantiles(role), dtype=float))
        return np.exp(np.interp(rng.random(n) * 100.0, PERCENTILES, logs))

    def sample_pairs(self, n: int, prompt_rng: np.random.Generator, output_rng: np.random.Generator
                     ) -> tuple[np.ndarray, np.ndarray]:
        """``n`` (prompt, output) lengths, rounded to tokens, each role from its own stream; a pair past
        ``max_total`` is drawn again, as the trace kept no such request."""
        prompts = np.maximum(1, np.round(self.sample("prompt", n, prompt_rng)))
        outputs = np.maximum(1, np.round(self.sample("output", n, output_rng)))
        if self.max_total is None:
            return prompts, outputs
        while (over := np.flatnonzero(prompts + outputs > self.max_total)).size:
            prompts[over] = np.maximum(1, np.round(self.sample("prompt", len(over), prompt_rng)))
            outputs[over] = np.maximum(1, np.round(self.sample("output", len(over), output_rng)))
        return prompts, outputs

    def describe(self, role: str) -> str:
        q = dict(zip(PERCENTILES, self.quantiles(role), strict=True))
        return (f"{self.name} ({self.source}): median {q[50.0]:,} tokens, 10th-90th percentile "
                f"{q[10.0]:,}-{q[90.0]:,}, at most {q[100.0]:,}")


#: Sarathi-Serve's ShareGPT trace: ``data/processed_traces/sharegpt_8k_filtered_stats_llama2_tokenizer.csv`` in
#: github.com/microsoft/sarathi-serve (Apache-2.0; read at commit 72339db, sha256 6d6c2963...), 30,731 requests of
#: ShareGPT conversations counted by the Llama-2 tokenizer, filtered to 8,192 tokens a request. Fitted by
#: ``scripts/fit_length_preset.py`` on that file (medians 1,730 prompt and 415 output tokens; 90th percentiles 5,696
#: and 834).
SHAREGPT = LengthPreset(
    name="sharegpt",
    source="ShareGPT as Sarathi-Serve's trace sharegpt_8k_filtered_stats_llama2_tokenizer.csv has it: 30,731 "
           "requests, Llama-2 tokens, cut at 8,192 a request",
    max_total=8192,
    prompt=(1, 9, 12, 18, 29, 46, 74, 180, 382, 580, 777, 973, 1203, 1457, 1730, 2060, 2401, 2799, 3235, 3734, 4278,
            4918, 5696, 6104, 6563, 7056, 7434, 7622, 8141),
    output=(2, 3, 6, 24, 44, 64, 84, 130, 181, 228, 271, 312, 346, 381, 415, 453, 493, 534, 581, 628, 683, 754, 834,
            876, 920, 965, 998, 1009, 1024),
)

PRESETS = {preset.name: preset for preset in (SHAREGPT,)}
