"""GPU-only code paths exercised on the CPU through the real libraries: the TF32 switch on torch's global
flags, every NVML name the telemetry reads against the installed nvidia-ml-py, and NVML field values decoded
from nvidia-ml-py's own ctypes structures."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch

from microbench.telemetry import nvml_reader
from microbench.timing import ops

ROOT = Path(__file__).resolve().parents[1]
# Modules that call NVML through a module object named nvml / m / pynvml / module (discovery.py goes
# through microbench.telemetry.nvml only).
NVML_CALLERS = ("microbench/telemetry/nvml.py", "microbench/telemetry/nvml_reader.py")
NVML_MODULE_NAMES = {"nvml", "m", "pynvml", "module"}
OWN_HELPERS = {"init_nvml", "find_handle", "device_state"}  # microbench.telemetry.nvml, imported as nvml


@pytest.fixture
def restore_fp32_precision():
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    yield matmul
    matmul.fp32_precision = before


@pytest.mark.parametrize("tf32, inside", [(True, "tf32"), (False, "ieee")])
def test_matmul_precision_uses_one_api_after_a_library_set_the_new_one(restore_fp32_precision, tf32, inside):
    # A library (or an earlier point) set the new API; torch then refuses reads of the legacy allow_tf32.
    restore_fp32_precision.fp32_precision = "tf32"
    with ops.matmul_precision(torch, tf32):
        assert restore_fp32_precision.fp32_precision == inside
    assert restore_fp32_precision.fp32_precision == "tf32"


def test_matmul_precision_restores_after_an_error(restore_fp32_precision):
    restore_fp32_precision.fp32_precision = "ieee"
    with pytest.raises(ZeroDivisionError), ops.matmul_precision(torch, True):
        1 / 0  # noqa: B018
    assert restore_fp32_precision.fp32_precision == "ieee"


def _nvml_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = {node.attr for node in ast.walk(tree)
             if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
             and node.value.id in NVML_MODULE_NAMES}
    names |= set(re.findall(r'"(NVML_[A-Z0-9_]+)"', path.read_text()))  # constants looked up by name
    return names - OWN_HELPERS


@pytest.mark.parametrize("relative", NVML_CALLERS)
def test_every_nvml_name_the_telemetry_reads_exists_in_nvidia_ml_py(relative):
    pynvml = pytest.importorskip("pynvml")
    names = _nvml_names(ROOT / relative)
    assert names, f"{relative}: no NVML names found (the scan no longer matches the code)"
    assert sorted(name for name in names if not hasattr(pynvml, name)) == []


@pytest.mark.parametrize("value_type, member, value", [
    ("NVML_VALUE_TYPE_DOUBLE", "dVal", 412.5),
    ("NVML_VALUE_TYPE_UNSIGNED_INT", "uiVal", 412),
    ("NVML_VALUE_TYPE_UNSIGNED_LONG_LONG", "ullVal", 2**40),
    ("NVML_VALUE_TYPE_SIGNED_LONG_LONG", "sllVal", -7),
    ("NVML_VALUE_TYPE_SIGNED_INT", "siVal", -3),
    ("NVML_VALUE_TYPE_UNSIGNED_SHORT", "usVal", 65),
])
def test_field_values_decode_from_nvidia_ml_py_structs(value_type, member, value):
    pynvml = pytest.importorskip("pynvml")
    field = pynvml.c_nvmlFieldValue_t()
    field.fieldId = pynvml.NVML_FI_DEV_POWER_INSTANT
    field.valueType = getattr(pynvml, value_type)
    field.nvmlReturn = pynvml.NVML_SUCCESS
    setattr(field.value, member, value)
    assert nvml_reader._field_value(field) == value


def test_a_failed_field_value_is_none():
    pynvml = pytest.importorskip("pynvml")
    field = pynvml.c_nvmlFieldValue_t()
    field.valueType = pynvml.NVML_VALUE_TYPE_DOUBLE
    field.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
    field.value.dVal = 1.0
    assert nvml_reader._field_value(field) is None


def test_gpm_metric_ids_fit_the_request_struct():
    pynvml = pytest.importorskip("pynvml")
    wanted = [getattr(pynvml, name) for name in nvml_reader.GPM_METRIC_NAMES if hasattr(pynvml, name)]
    assert len(wanted) == len(nvml_reader.GPM_METRIC_NAMES)
    request = pynvml.c_nvmlGpmMetricsGet_t()
    assert len(wanted) <= len(request.metrics)
    for index, metric_id in enumerate(wanted):
        request.metrics[index].metricId = metric_id
        assert request.metrics[index].metricId == metric_id
