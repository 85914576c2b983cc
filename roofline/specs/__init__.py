"""Spec sheets read from ``profiles/``: GPU SKUs (``gpus``) and LLM layer shapes (``models``), and published
datasets' request lengths (``length_presets``: a workload's spec sheet).
"""
