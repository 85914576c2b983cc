"""Reading a result: the roofline fit per series (``fit``, ``series``), the references every
percentage is taken against (``reference``), the summary and verdict in words (``summary``, ``verdict``), how far
to trust it (``trust``) and whether a difference is real (``significance``).
"""
