"""The serving documents' keys, declared once: the step profile (``step_profile``), the simulation document
(``simulation``) and the validation document (``validation``), as records of the result's key registry, and
``registry``, which generates their JSON Schemas under docs/ and the key tables of docs/reference/.
"""
