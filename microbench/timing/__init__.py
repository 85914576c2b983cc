"""How one workload is timed: the ops on torch and CuPy with their rotated inputs (``ops``,
``cupy_backend``, ``cupy_cublas``, ``kernels/``), the timers (``timers``), adaptive stopping (``adaptive``), the step
every measuring command shares (``measure``), the session a run holds (``session``), and how a run reports and stops
(``observer``, ``interrupt``).
"""
