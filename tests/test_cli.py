"""Bad input through the real CLI: one line, exit 2, nothing written."""

import sys

import pytest
from click.testing import CliRunner

from microbench.cli.app import main


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.mark.parametrize("args, message", [
    (["--batch", "0"], "gpubench: error: batch must be positive, got 0"),
    (["--batch", "-3"], "gpubench: error: batch must be positive, got -3"),
    (["--batch", "1:x"], "gpubench: error: batch 'x' is not an integer"),
    (["--op", "conv"], "gpubench: error: unknown op 'conv'; choose from"),
    (["--dtype", "int4"], "gpubench: error: unknown dtype 'int4'; choose from"),
    (["--shape", "8192"], "gpubench: error: shape '8192' is not NxK"),
    (["--shape", "0x8"], "gpubench: error: shape '0x8' must have positive dimensions"),
    (["--shape", "200000x200000"], "at its smallest batch; the device has"),
    (["--device", "tpu"], "gpubench: error: unknown device 'tpu'"),
    (["--device", "cuda:7"], None),  # the message depends on the machine: computed below
    (["--target-ci", "2"], "gpubench: error: --target-ci 2: must be between 0 and 1 (0.01 is 1%)"),
    (["--budget", "-1"], "gpubench: error: --budget -1: must be more than 0"),
])
def test_bad_sweep_input(tmp_path, args, message):
    if message is None:
        pytest.importorskip("torch")
        from microbench.device.discovery import cuda_status

        count, why = cuda_status()
        message = f"gpubench: error: --device cuda:7: {f'only {count} CUDA device(s)' if count else why}"
    output = tmp_path / "x.json"
    result = run("sweep", "--device", "cpu", *args, "-o", str(output)) if "--device" not in args else \
        run("sweep", *args, "-o", str(output))
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert message in lines[-1], result.output  # the one line that says why, not an echo of the argument
    assert not output.exists()


def test_unwritable_output(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    result = run("sweep", "--device", "cpu", "--quick", "-o", str(blocker / "x.json"))
    assert result.exit_code == 2
    assert "cannot write" in result.output


def test_output_that_is_a_directory(tmp_path):
    result = run("sweep", "--device", "cpu", "--quick", "-o", str(tmp_path))
    assert result.exit_code == 2
    assert "is a directory" in result.output


def test_devices_without_gpu_lists_the_cpu():
    import torch

    result = run("devices")
    assert result.exit_code == 0
    if not torch.cuda.is_available():
        assert "No CUDA GPU" in result.output
        assert "CPU:" in result.output


def test_read_only_commands_do_not_import_torch():
    import subprocess

    code = "import sys, microbench.cli.app, roofline.result.document, roofline.result.io, roofline.analysis.summary; " \
           "print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_simulate_and_analytic_profile_do_not_import_torch(tmp_path):
    """The simulator is analysis: running it (and writing its host record) must not load torch."""
    import subprocess

    code = ("import sys; from click.testing import CliRunner; from microbench.cli.app import main; "
            f"out = {str(tmp_path)!r}; "
            "a = CliRunner().invoke(main, ['profile', '--analytic', '--gpu', 'h200-sxm', '--model', 'llama-3-8b', "
            "'-o', out + '/p.json']); "
            "b = CliRunner().invoke(main, ['simulate', out + '/p.json', '--requests', '8', '-o', out + '/sim']); "
            "print(a.exit_code, b.exit_code, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", "0", "False"], out.stdout + out.stderr


def test_help_lists_commands():
    result = run("--help")
    assert result.exit_code == 0
    for command in ("sweep", "ceilings", "devices", "fit", "report", "import", "compare", "decode"):
        assert command in result.output
