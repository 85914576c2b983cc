"""The serving documents as data: what every key of a step profile (roofline.serving.schemas.step_profile), a
simulation document (roofline.serving.schemas.simulation), a validation document
(roofline.serving.schemas.validation) and a plan (roofline.serving.schemas.plan) holds,
declared once as records of the result's key registry (roofline.result.keys), and the JSON Schema of each
generated from those declarations.

The declarations follow the writers key for key, in the order they write them: ``StepProfile.to_dict``,
``roofline.serving.document.simulation_document``, ``microbench.serving.validate_run.validation_document`` and
``roofline.fleet.plan_document.plan_document``.
Tests check that the schemas under docs/ are what ``schema_texts()`` generates, that the key tables of
docs/reference/ are what ``key_tables()`` prints, that a fresh document of each kind and every checked-in one
validates with the ``jsonschema`` package, and that a writer writes no key its declaration lacks (every
record says ``additionalProperties: false``).  Regenerate after changing a declaration:
``python -c "from roofline.serving.schemas.registry import write_schemas; write_schemas()"``.

``tool``, ``host`` and ``device`` are the result's own sections (the same functions write them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from roofline.result.json_schema import document_schema, key_table, records
from roofline.result.keys import Record
from roofline.result.sections import SECTIONS
from roofline.serving import document as simulation_doc
from roofline.serving import profile_doc
from roofline.serving.schemas.plan import PLAN_VERSION, PlanDocument
from roofline.serving.schemas.simulation import SimulationDocument
from roofline.serving.schemas.step_profile import StepProfileDocument
from roofline.serving.schemas.validation import VALIDATION_VERSION, ValidationDocument

DOCS = Path(__file__).resolve().parents[3] / "docs"


# --- the step profile -------------------------------------------------------------------------------------
# --- the schemas, their files and the key tables -----------------------------------------------------------
def documents() -> dict[str, tuple[type[Record], str, str]]:
    """name -> (top-level record, schema file under docs/, title), for every serving document."""
    return {"step-profile": (StepProfileDocument, "step-profile.schema.json",
                             f"gpubench step profile, schema_version {profile_doc.SCHEMA_VERSION}"),
            "simulation": (SimulationDocument, "simulation.schema.json",
                           f"gpubench simulation document, schema_version {simulation_doc.SCHEMA_VERSION}"),
            "validation": (ValidationDocument, "validation.schema.json",
                           f"gpubench validation document, schema_version {VALIDATION_VERSION}"),
            "plan": (PlanDocument, "plan.schema.json", f"gpubench plan, schema_version {PLAN_VERSION}")}


def schema(name: str) -> dict[str, Any]:
    root, file_name, title = documents()[name]
    return document_schema(root, file_name, title, f"the {name} document")


def schema_path(name: str) -> Path:
    return DOCS / documents()[name][1]


def schema_texts() -> dict[str, str]:
    return {name: json.dumps(schema(name), indent=1, ensure_ascii=False) + "\n" for name in documents()}


def write_schemas() -> None:
    """Regenerate docs/step-profile.schema.json, docs/simulation.schema.json, docs/validation.schema.json and
    docs/plan.schema.json, and the key tables of docs/reference/<name>.md (everything from a page's first table on)."""
    for name, text in schema_texts().items():
        schema_path(name).write_text(text, encoding="utf-8")
        page = DOCS / "reference" / f"{name}.md"
        before = page.read_text(encoding="utf-8")
        start = before.index(TABLES_START)
        page.write_text(before[:start] + key_tables(name).rstrip() + "\n", encoding="utf-8")


TABLES_START = "#### `(top level)`"  # where a reference page's generated tables begin


WRITERS = {"step-profile": "roofline.serving.profile_doc.StepProfile.to_dict (analytic: "
                           "roofline.serving.profiles.analytic; measured: microbench.serving.profile_run)",
           "simulation": "roofline.serving.document.simulation_document",
           "validation": "microbench.serving.validate_run.validation_document",
           "plan": "roofline.fleet.plan_document.plan_document"}


def document_records(name: str) -> list[type[Record]]:
    """The records docs/reference/<name>.md tabulates for document ``name``: its own, each once over all the documents
    (a record two documents share is listed under the first), the result's sections left to reference/result.md."""
    seen = set(SECTIONS.values())
    for before in documents():
        if before == name:
            break
        seen |= set(records(documents()[before][0]))
    result_records = set(records())
    return [r for r in records(documents()[name][0]) if r not in seen and r not in result_records]


def key_tables(name: str) -> str:
    """The key tables of docs/reference/<name>.md for document ``name`` (they replace the tables there)."""
    return "\n".join(key_table(r, {"": WRITERS[name]}) for r in document_records(name))
