"""How one workload is timed: the ops on torch and CuPy with their rotated inputs (``ops``,
``cupy_backend``, ``cupy_cublas``, ``kernels/``), the weight-only formats (``weight_only``; w8a16 on CUDA through
gpubench's Triton kernel, ``triton_w8a16``), the timers (``timers``), adaptive stopping (``adaptive``), the step
every measuring command shares (``measure``), the session a run holds (``session``), and how a run reports and stops
(``observer``, ``interrupt``).
"""
