"""bench.py runs end to end and reports every figure under the names the README uses (no timing asserts)."""
import json

import bench


def test_bench_reports_every_figure(tmp_path):
    path = tmp_path / "bench.json"
    res = bench.main(["--arch", "cnn", "--batch-size", "16", "--num-classes", "10", "--images", "64", "--epochs", "1",
                      "--warmup", "1", "--repeats", "2", "--rounds", "1", "--workers", "0", "--json", str(path)])
    saved = json.loads(path.read_text())
    for key in ("loss_overhead", "step_ratio", "paper_ratio"):
        assert saved[key] == res[key] and saved[key] > 0
    assert saved["throughput"]["device_fp32"] > 0 and saved["throughput"]["dataloader_fp32"] > 0
    assert {"device", "torch", "command", "date"} <= set(saved)
