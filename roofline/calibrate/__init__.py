"""Calibration from the engine you run: a real serving benchmark's per-request results (``bench``: vLLM's and
GuideLLM's files), the same requests replayed through the simulator on a step profile (``replay``), the engine's
overhead fitted on them (``fit``), and what ``gpubench calibrate`` is asked (``config``) and writes (``document``).
"""
