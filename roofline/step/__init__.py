"""The step model: what one engine step of a model is, written down once.

From a model spec (``roofline.specs``), a parallelism (tensor and expert parallel: ``parallel``), the dtypes and a
routing (``routing``), ``launches.StepModel`` lists one step's kernel launches for a batch composition (decodes at
their contexts, prefill chunks over their prefixes): each launch's op (gemm, grouped, attention, mla_attention),
shapes, dtype, count per step and its FLOP and bytes from ``roofline.core.counting``.  ``memory`` says what the
model holds on each GPU (weights, KV cache per token).  ``decode``, the analytic and the measured step profiles and
the simulator's step cost all read it: a model family, an op kind or a format is added here once.
"""
