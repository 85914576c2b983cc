"""Measuring side of gpubench: devices, ops, timers, telemetry, sweeps, measured decode,
step profiles and validate, and the CLI.

Importing this package does not import torch; the modules that need it import it themselves.
"""

__version__ = "0.1.0"
