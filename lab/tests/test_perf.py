"""tools/perf.py's parts run end to end and report every figure under the names the docs quote (no timing asserts)."""
import json
import shlex
import statistics

import pytest
import torch
from test_cuda_config import has_cpp_compiler
from test_faults import readme_and_docs, shown_commands

from tools import perf


def test_cost_reports_every_figure(tmp_path):
    path = tmp_path / "cost.json"
    res = perf.main(["cost", "--arch", "cnn", "--batch-size", "16", "--num-classes", "10", "--images", "64", "--epochs", "1",
                      "--warmup", "1", "--repeats", "2", "--rounds", "1", "--workers", "0", "--json", str(path)])
    saved = json.loads(path.read_text())
    for key in ("loss_overhead", "step_ratio", "paper_ratio"):
        assert saved[key] == res[key] and saved[key] > 0
    assert saved["throughput"]["device_fp32"] > 0 and saved["throughput"]["dataloader_fp32"] > 0
    assert {"device", "torch", "command", "date"} <= set(saved)
    assert set(saved["peers"]) == {"2", "3", "4"}  # the cohort's step against N plain CE steps, per N
    for m, fig in saved["peers"].items():
        assert fig["step_ratio"] == pytest.approx(fig["cmd_step_ms"] / fig["ce_steps_ms"]) and fig["step_ratio"] > 0
        if torch.cuda.is_available():  # cost runs on the GPU where there is one, and then measures memory
            assert fig["peak_memory_mib"] > 0
        else:
            assert fig["peak_memory_mib"] is None  # measured on CUDA only
    assert saved["peers"]["2"]["step_ratio"] == saved["step_ratio"]


@pytest.mark.parametrize("flags,message", [
    (["cost", "--peers", "1,3"], "--peers 1,3: a comma list of cohort sizes between 2 and 26"),
    (["cost", "--batch-size", "0"], "--batch-size 0: must be at least 1"),
    (["cost", "--skip", "bogus"], "unknown figure(s) bogus in --skip"),
    (["cost", "--json", "{tmp}/no/such/folder.json"], "cannot write a file there"),
    (["suite", "--budget", "nan"], "--budget nan: give the seconds"),
    (["suite", "--json", "{tmp}"], "cannot write a file there"),  # a folder
    (["suite", "--skip", "step,bogus"], "unknown part(s) bogus in --skip"),
    (["profile", "--arch", "resnet35"], "unknown architecture 'resnet35'"),
    (["batched", "--runs", "0"], "--runs 0: must be at least 1"),
    (["batched", "--data-dir", "{tmp}/none"], "--data-dir {tmp}/none not found"),
])
def test_every_part_refuses_bad_flags_before_timing_anything(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as e:
        perf.main([f.format(tmp=tmp_path) for f in flags])
    assert e.value.code == 2 and message.format(tmp=tmp_path) in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_every_perf_command_shown_in_the_readme_and_docs_is_accepted():
    lines = [c for text in readme_and_docs().values() for c in shown_commands(text, "-m tools.perf")]
    assert {shlex.split(c)[3] for c in lines} == {"cost", "suite", "profile", "batched"}
    for line in lines:
        perf.parse(shlex.split(line)[3:])  # refuses a part, flag or value that no longer exists


def test_profile_reports_where_the_step_goes(capsys):
    fig = perf.main(["profile", "--arch", "mlp", "--batch-size", "8", "--steps", "1", "--top", "3", "--device", "cpu"])
    assert fig["step_ms_cudnn_benchmark_false"] > 0 and fig["device_busy_ms"] > 0 and fig["profiled_wall_ms"] > 0
    assert "per step under the profiler" in capsys.readouterr().out


# Every key the suite writes, as the README's performance section names them.
SUITE_KEYS = {
    "device", "torch", "cuda", "cudnn", "date", "command", "step", "small", "budget_s", "amp", "wall_s",
    "sync_free", "sync_free_cases", "torchrun_nccl", "torchrun_s",
    "step_ratio", "step_ms_cmd", "step_ms_ce",
    "throughput_dataloader_fp32", "throughput_device_fp32", "throughput_device_bf16_cl",
    "device_fp32_over_dataloader", "device_bf16_cl_over_dataloader",
    "epoch_s", "epochs_100_min", "epochs_other_s", "peak_memory_gib",
    "eager_warmup_s", "eager_step_ms",
    *(f"compile_{m}_{k}" for m in ("default", "reduce_overhead", "max_autotune_no_cudagraphs")
      for k in ("warmup_s", "step_ms", "speedup")),
    "epoch_s_compile", "epochs_100_min_compile", "compile_breakeven_epochs", "compile_pays_off",
    "graph_step_ms_eager", "graph_step_ms_eager_fused", "graph_step_ms", "graph_ce_step_ms", "graph_step_ratio",
    "graph_speedup", "graph_capture_s", "graph_memory_gib", "eager_memory_gib",
    "epoch_s_graph", "epochs_100_min_graph", "peak_memory_gib_graph", "peak_reserved_gib_graph", "graph_run_speedup",
    "graph_compile_warmup_s", "graph_compile_step_ms", "graph_compile_speedup",
    "batched_runs", "batched_run_epochs_per_s", "batched_tflops", "batched_run_epochs_per_s_graph",
    "batched_tflops_graph", "batched_graph_speedup",
}
CUDA_ONLY = {"sync_free", "sync_free_cases", "torchrun_nccl", "torchrun_s", "peak_memory_gib",
             "graph_step_ms", "graph_ce_step_ms", "graph_step_ratio", "graph_speedup", "graph_capture_s",
             "graph_memory_gib", "eager_memory_gib", "epoch_s_graph", "epochs_100_min_graph", "peak_memory_gib_graph",
             "peak_reserved_gib_graph", "graph_run_speedup", "graph_compile_warmup_s", "graph_compile_step_ms",
             "graph_compile_speedup", "batched_run_epochs_per_s_graph", "batched_tflops_graph", "batched_graph_speedup",
             *(f"compile_{m}_{k}" for m in ("reduce_overhead", "max_autotune_no_cudagraphs")
               for k in ("warmup_s", "step_ms", "speedup"))}


def test_the_suite_on_cpu_writes_every_key(tmp_path):
    path = tmp_path / "perf.json"
    res = perf.main(["suite", "--device", "cpu", "--json", str(path)])
    saved = json.loads(path.read_text())
    reasons = saved.pop("reasons")
    assert SUITE_KEYS <= set(saved) and saved["small"] is True  # small sizes without being asked, on CPU
    for key in SUITE_KEYS:
        if key in CUDA_ONLY:  # null, with the reason in the JSON
            assert saved[key] is None and "CUDA only" in reasons[key], key
        elif key == "compile_breakeven_epochs" and saved[key] is None:  # a measured outcome, not a gap
            assert reasons[key] == "compiled epochs are not faster than eager ones"
        elif "compile" in key and not has_cpp_compiler():
            assert saved[key] is None and reasons[key], key
        else:  # measured here
            assert saved[key] is not None and key not in reasons, (key, reasons.get(key))
    assert saved["torch"] == torch.__version__ and saved["device"].startswith("cpu")
    assert len(saved["epoch_s"]) == len(saved["epoch_s_compile"]) == 3 and min(saved["epoch_s"]) > 0
    assert saved["epochs_100_min"] == pytest.approx((saved["epoch_s"][0] + 99 * statistics.mean(saved["epoch_s"][1:]))
                                                    / 60)
    ratio = saved["throughput_device_bf16_cl"] / saved["throughput_dataloader_fp32"]
    assert saved["device_bf16_cl_over_dataloader"] == pytest.approx(ratio)
    assert saved["step_ratio"] == pytest.approx(saved["step_ms_cmd"] / saved["step_ms_ce"])
    assert saved["compile_default_speedup"] == pytest.approx(saved["eager_step_ms"] / saved["compile_default_step_ms"])
    assert saved["batched_runs"] == [2] and set(saved["batched_tflops"]) == set(saved["batched_run_epochs_per_s"]) == {"2"}
    assert saved == {k: v for k, v in res.items()}


def test_the_suite_records_why_a_part_was_not_run(tmp_path):
    res = perf.main(["suite", "--device", "cpu", "--skip", "step,throughput,graph,epochs,batched,graph_compile,compile,"
                           "epochs_compile", "--json",
                           str(tmp_path / "p.json")])
    assert res["step_ratio"] is None and res.reasons["step_ratio"] == "skipped with --skip"
    assert SUITE_KEYS <= set(res)
