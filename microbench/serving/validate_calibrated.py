"""The calibrated step profiles ``gpubench validate -o DIR`` writes beside validate.json: per engine path, the
profile the validation predicted from with that path's fitted overhead as its ``engine_overhead``, so
``gpubench simulate DIR/calibrated-static.json`` predicts the engine that was measured, not bare kernels.
Each records where its overhead was fitted (``engine_overhead.fitted_from``): an overhead belongs to one
engine, version, mode and path, and a profile that travels without saying so would be read as general.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from roofline.result.folders import FolderKind
from roofline.serving.profile_doc import EngineOverhead, StepProfile, load_profile
from roofline.serving.schemas.validation import VALIDATION_KIND

PATHS = ("static", "continuous")


def calibrated_name(path: str) -> str:
    """The file of one path's calibrated profile in the output folder."""
    return f"calibrated-{path}.json"


# What ``gpubench validate -o`` writes: validate.json, the profile it measured (and, while measuring, that
# profile's partial file and journal) and each path's calibrated profile.
VALIDATE_FOLDER = FolderKind("validate", "validate.json", kind=VALIDATION_KIND,
                             files=("profile.json", "profile.json.partial", "profile.json.partial.journal",
                                    *(calibrated_name(path) for path in PATHS)))


def overhead_source(document: dict[str, Any], validation: Path, path: str) -> dict[str, Any]:
    """``fitted_from`` of one path's overhead: what validate.json says about the fit, in one record."""
    settings = document["runs"][path]["measured"].get("settings", {})
    setup = document["setup"]
    calibration = (f"{setup['calibration_requests']} requests, burst, prompt {setup['prompt']}, output "
                   f"{setup['output']}, seed {setup['seed'] + 1}")
    return {"validation": str(validation), "engine": document["engine"]["name"],
            "engine_version": settings.get(document["engine"]["name"]),
            "mode": setup.get("engine_mode", "eager"), "path": path,
            "policy": document["runs"][path]["predicted"]["policy"]["policy"], "calibration": calibration}


def calibrated_profile(profile: StepProfile, document: dict[str, Any], validation: Path, path: str) -> StepProfile:
    """``profile`` with ``path``'s fitted overhead (validate.json's ``calibration.<path>.overhead``) as its
    ``engine_overhead``, its ``fitted_on`` naming the engine, mode and path beside the calibration."""
    source = overhead_source(document, validation, path)
    fit = EngineOverhead.from_dict(document["calibration"][path]["overhead"])
    fitted_on = (f"gpubench validate {validation}: {source['engine']} {source['engine_version']}, "
                 f"{source['mode']} mode, {fit.fitted_on}")
    return replace(profile, engine_overhead=replace(fit, fitted_on=fitted_on, fitted_from=source),
                   basis=f"{profile.basis}; engine overhead calibrated on the {path} path by gpubench validate")


def calibrated_profiles(document: dict[str, Any], folder: Path, written_in: Path | None = None
                        ) -> dict[Path, StepProfile]:
    """Each path's calibrated profile by the file it goes to in ``folder``, from the profile validate.json
    names.  ``written_in``: where the files of ``folder`` are until it is put in place (its staging folder), so
    a profile measured into ``folder`` is read from there."""
    named = Path(document["profile"]["path"])
    here = written_in / named.name if written_in is not None and named.parent == folder else named
    profile = load_profile(here)
    validation = folder / "validate.json"
    return {folder / calibrated_name(path): calibrated_profile(profile, document, validation, path)
            for path in PATHS if path in document["calibration"]}
