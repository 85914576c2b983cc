"""The sweep (what it is asked to do: ``microbench.points``): preparing one to run (``prepare``), the loop over its
points (``loop``),
continuing one (``resume``), one process per GPU (``multi``) and the measured ceilings its points are read against
(``ceilings``, ``peaks``).
"""
