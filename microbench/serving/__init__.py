"""The serving side that runs on the device: the measured step profile (``profile_*``), the real
engines (``engine/``) and ``validate`` (``validate_*``), which drives an engine and compares it with the simulator.
"""
