"""Analysis side of gpubench: result schema and I/O, spec sheets, statistics, fits, reports,
the serving simulator.

Never imports torch, cupy or pynvml: commands that only read results stay light.
"""
