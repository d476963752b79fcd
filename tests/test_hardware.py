"""`--precision auto` follows the hardware: bf16 only where it is computed natively."""

import pytest

from components.trainer.hardware import (
    Hardware,
    PrecisionError,
    cpu_bf16_blocked,
    decide_precision,
    read_cpu_facts,
)

ZEN3 = Hardware("cpu", "AMD EPYC 7B13", ("avx2", "fma"))
ZEN4 = Hardware("cpu", "AMD EPYC 9B14", ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16"))
SAPPHIRE_RAPIDS = Hardware("cpu", "Intel Xeon 8481C", ("avx2", "avx512f", "amx_bf16", "amx_tile"))


@pytest.mark.parametrize(
    "hardware, policy",
    [
        (ZEN3, "float32"),
        (ZEN4, "mixed_bfloat16"),
        (SAPPHIRE_RAPIDS, "mixed_bfloat16"),
        (Hardware("cpu", "Apple M2"), "float32"),  # no /proc/cpuinfo flags: never guess bf16
        (Hardware("tpu"), "mixed_bfloat16"),
        (Hardware("gpu", gpu_name="A100", gpu_compute_capability=(8, 0)), "mixed_bfloat16"),
        (Hardware("gpu", gpu_name="T4", gpu_compute_capability=(7, 5)), "mixed_float16"),
        (Hardware("gpu", gpu_name="K80", gpu_compute_capability=(3, 7)), "float32"),
    ],
)
def test_auto_precision_per_kind_of_hardware(hardware, policy):
    choice = decide_precision("auto", hardware)
    assert choice.policy == policy
    assert choice.reason  # says what decided it


def test_cpu_reason_names_the_model_and_the_deciding_feature():
    assert decide_precision("auto", ZEN4).reason == "CPU AMD EPYC 9B14: native bf16 (avx512_bf16)"
    assert "no native bf16" in decide_precision("auto", ZEN3).reason


def test_onednn_capped_below_bf16_means_float32():
    capped = Hardware("cpu", "AMD EPYC 9B14", ZEN4.cpu_flags, onednn_max_isa="AVX2")
    choice = decide_precision("auto", capped)
    assert choice.policy == "float32" and "ONEDNN_MAX_CPU_ISA=AVX2" in choice.reason
    allowed = Hardware("cpu", "AMD EPYC 9B14", ZEN4.cpu_flags, onednn_max_isa="avx512_core_bf16")
    assert decide_precision("auto", allowed).policy == "mixed_bfloat16"


def test_an_explicit_precision_is_kept_on_any_hardware():
    assert decide_precision("mixed_bfloat16", ZEN3).policy == "mixed_bfloat16"
    assert decide_precision("float32", ZEN4).policy == "float32"


def test_cpu_facts_are_read_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: AMD EPYC 9B14\n"
        "flags\t\t: fpu sse2 avx2 fma avx512f avx512_bf16 sha_ni\n\n"
        "processor\t: 1\nmodel name\t: AMD EPYC 9B14\nflags\t\t: fpu\n"
    )
    model, flags = read_cpu_facts(str(cpuinfo))
    assert model == "AMD EPYC 9B14"
    assert flags == ("avx2", "fma", "avx512f", "avx512_bf16")
    assert read_cpu_facts(str(tmp_path / "missing"))[1] == ()


def test_summary_facts_are_plain_json():
    facts = Hardware("gpu", "x", ("avx2",), gpu_name="T4", gpu_compute_capability=(7, 5)).to_json()
    assert facts == {
        "accelerator": "gpu",
        "cpu_model": "x",
        "cpu_flags": ["avx2"],
        "gpu_name": "T4",
        "gpu_compute_capability": "7.5",
    }


@pytest.mark.parametrize("cap", ["AVX2", "avx2", "AVX", "SSE41", "AVX2_VNNI"])
def test_bf16_on_an_avx512_cpu_capped_below_avx512_core_is_refused(cap):
    """The AVX2 stand-in on a bf16 machine: TensorFlow still routes bf16 to oneDNN, which
    then has no bf16 kernel, so training would abort in its first convolution."""
    for cpu in (ZEN4, SAPPHIRE_RAPIDS):
        capped = Hardware("cpu", cpu.cpu_model, cpu.cpu_flags, onednn_max_isa=cap)
        with pytest.raises(PrecisionError, match=f"ONEDNN_MAX_CPU_ISA={cap}.*--precision float32"):
            decide_precision("mixed_bfloat16", capped)
        assert decide_precision("auto", capped).policy == "float32"
        assert decide_precision("float32", capped).policy == "float32"


@pytest.mark.parametrize(
    "hardware",
    [
        ZEN3,  # no AVX512F: TensorFlow's own (emulated) bf16 kernels
        Hardware("cpu", "AMD EPYC 9B14", ZEN4.cpu_flags, onednn_max_isa="AVX512_CORE"),
        Hardware("tpu", onednn_max_isa="AVX2"),  # the cap is about the host CPU only
        SAPPHIRE_RAPIDS,
    ],
)
def test_bf16_is_allowed_wherever_it_runs_even_emulated(hardware):
    assert cpu_bf16_blocked(hardware) == ""
    assert decide_precision("mixed_bfloat16", hardware).policy == "mixed_bfloat16"


def test_run_refuses_bf16_it_cannot_train_before_any_step(tmp_path, capsys, monkeypatch):
    """`run --precision mixed_bfloat16` on an AVX-512 CPU capped below bf16, with no GPU: the
    same one line as the Trainer's, before a step runs (the data is never read), nothing
    written."""
    from components.trainer import hardware
    from pipeline import cli

    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setattr(hardware, "read_cpu_facts", lambda *a: ("Test CPU", ZEN4.cpu_flags))
    out = tmp_path / "out"
    args = ["run", "--output-dir", str(out), "--data", str(tmp_path / "never-read.tar.gz")]
    assert cli.main([*args, "--precision", "mixed_bfloat16"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {cpu_bf16_blocked(hardware.detect('cpu'))}"]
    assert not out.exists()
    # float32 and auto go on to the data, which is missing here
    assert cli.main([*args, "--precision", "auto"]) == 2
    assert "never-read.tar.gz" in capsys.readouterr().err
