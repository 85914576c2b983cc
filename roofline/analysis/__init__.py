"""Reading a result: the roofline fit per series (``fit``, ``series``), the references every
percentage is taken against (``reference``), the summary and verdict in words (``summary``, ``verdict``), how far
to trust it (``trust``), whether a difference is real (``significance``), and where a weight-only format stops
paying off against bf16 (``formats``); and the Pareto front of
points better on two axes (``frontier``: a serving run's throughput per GPU against its tokens/s per user).
"""
