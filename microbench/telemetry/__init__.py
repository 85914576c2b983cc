"""The GPU's own counters while measuring: the sampler thread and window summaries (``sampler``),
safe NVML queries (``nvml``) and the real NVML/GPM reader (``nvml_reader``).
"""
