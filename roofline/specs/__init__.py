"""Spec sheets read from ``profiles/``: GPU SKUs (``gpus``) and models (``models``: a model as its blocks' layer
kinds, ``layers``; a Hugging Face config.json read whole or refused, ``hf_config`` with its keys classed in
``hf_keys``; a checkpoint's quantization per part, ``quantization``), and published datasets' request lengths
(``length_presets``: a workload's spec sheet), and serving engines' overhead outside their kernels as published by
others (``engines``: ``profiles/engines``, an engine's spec sheet).
"""
