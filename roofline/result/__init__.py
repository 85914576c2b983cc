"""The result document: its points and sections (``document``, ``sections``, ``keys``), reading and
writing it (``io``, ``journal``), its JSON Schema (``json_schema``) and importing measurements made elsewhere
(``importer``).
"""
