"""Reading a result: the roofline fit per series (``fit``, ``series``), the references every
percentage is taken against (``reference``), the summary and verdict in words (``summary``, ``verdict``), how far
to trust it (``trust``), whether a difference is real (``significance``), and where a weight-only format stops
paying off against bf16 (``formats``).
"""
