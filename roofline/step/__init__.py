"""The step model: what one engine step of a model is, written down once.

From a model spec (``roofline.specs``: its blocks' layer kinds), a parallelism (tensor and expert parallel:
``parallel``), the dtypes and a routing (``routing``), ``launches.StepModel`` lists one step's kernel launches for a
batch composition (``batch``: decodes at their contexts, prefill chunks over their prefixes), each mixer kind through
its rules (``kinds``): each launch's op (gemm, grouped, attention, mla_attention, dsa_attention, linear_attention,
mamba2), shapes, dtype, count per step and its FLOP and bytes from ``roofline.core.counting``.  ``memory`` says what
the model holds on each GPU (weights, KV cache per token, windows and recurrent states per sequence).  ``decode``,
the analytic and the measured step profiles and the simulator's step cost all read it: a model family, a layer kind,
an op kind or a format is added here once.
"""
