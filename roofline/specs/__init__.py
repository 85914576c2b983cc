"""Spec sheets read from ``profiles/``: GPU SKUs (``gpus``) and LLM layer shapes (``models``).
"""
