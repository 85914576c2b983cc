"""Analysis side of gpubench: result schema and I/O, profiles, statistics, fits, reports.

Never imports torch, cupy or pynvml: commands that only read results stay light.
"""
