"""A model's decode step from per-launch times: the step model (``step``), its document (``document``)
and its figure (``plot``).
"""
