"""What a user copies runs alone and trains what train.py trains.

The README's "Copy the loss" block, with the functions it says to paste, runs in a fresh interpreter in an empty
directory, and its losses, chi, taught counts and MyLC's r follow mutual_step (CMD-P + MyLC, Method's defaults)
and train.py's r step by step, over a run long enough for r to pass rho. losses.cmd_loss pasted alone below
`import math, torch, F`, and schedule.py copied whole, give the objective's numbers on a random batch; noise.py
copied whole gives the project's noisy labels.
"""
import ast
import builtins
import inspect
import json
import math
import os
import re
import subprocess
import symtable
import sys

import torch

import label_correction
import losses
import mutual
import noise
import schedule
from mutual import Clock, Method, Precision, mutual_step, sum_names
from tools import cmdloss

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root
HEADER = "import math\n\nimport torch\nimport torch.nn.functional as F\n"  # all a pasted function may import
MODULES = {"schedule.py": schedule, "losses.py": losses, "label_correction.py": label_correction}
TOL = 1e-5


def readme_block():
    """The one Python block of the README's "Copy the loss" section."""
    text = open(os.path.join(HERE, "README.md")).read()
    section = text[text.index("## Copy the loss\n"):]
    section = section[:section.index("\n## ")]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, f"the copy section has {len(blocks)} Python blocks, not one"
    return blocks[0]


def pasted(block):
    """[(file, function, lines)] that the block's comments say to paste, and the total they state."""
    listed = [(f, name, int(n)) for f, names in re.findall(r"^#\s+(\w+\.py): (.+)$", block, re.M)
              for name, n in re.findall(r"(\w+) \((\d+) lines\)", names)]
    total = int(re.search(r"\((\d+) lines\):", block).group(1))
    return listed, total


def free_names(source):
    """The global names that the functions defined in source read (their bodies and nested scopes)."""
    names = set()

    def walk(table):
        if table.get_type() != "module":
            names.update(s.get_name() for s in table.get_symbols() if s.is_global())
        for child in table.get_children():
            walk(child)
    walk(symtable.symtable(source, "pasted", "exec"))
    return names


def run_alone(tmp_path, script, files):
    """Run script in a fresh interpreter, cwd = tmp_path holding only `files` (None: already there), without this
    repository on its path. Returns the JSON lines it prints."""
    for name, text in files.items():
        if text is not None:
            (tmp_path / name).write_text(text)
    (tmp_path / "main.py").write_text(script)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    res = subprocess.run([sys.executable, "-E", "-s", "main.py"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__") == sorted([*files, "main.py"])
    return [json.loads(line) for line in res.stdout.splitlines()]


def test_the_readme_block_runs_as_pasted_and_trains_what_train_py_trains(tmp_path):
    block = readme_block()
    listed, total = pasted(block)
    sources = []
    for file, name, lines in listed:
        source = inspect.getsource(getattr(MODULES[file], name))
        assert len(source.splitlines()) == lines, f"the README says {file}:{name} has {lines} lines"
        sources.append(source)
    assert sum(n for _, _, n in listed) == total
    names = {name for _, name, _ in listed}
    assert {"cmd_loss", "chi", "mylc", "confidence_from_sum"} <= names
    assert [name for _, name, _ in listed] == [name for _, name in cmdloss.FUNCTIONS]
    module = cmdloss.text()  # what `python -m tools.cmdloss cmdloss.py` writes: the notice, then the functions
    license_text = open(os.path.join(HERE, "LICENSE")).read()
    assert module.startswith("# MIT License\n") and all(f"# {line}".rstrip() in module for line in license_text.splitlines())
    assert module.endswith(HEADER + "".join(f"\n\n{s}" for s in sources))
    missing = free_names(module) - names - {"math", "torch", "F"} - set(dir(builtins))
    assert not missing, f"the pasted functions also need {missing}"
    imported = re.search(r"^from (\w+) import (.+)$", block, re.M)
    assert {n.strip() for n in imported.group(2).split(",")} <= names
    rows = run_alone(tmp_path, block, {f"{imported.group(1)}.py": module})

    # The same data and models, trained by the project: mutual_step with Method's defaults, train.py's r.
    import train  # imported here, as the other tests do: its r function, which tools.batched shares
    from tools import batched
    assert train.confidence_from_sum is batched.confidence_from_sum is label_correction.confidence_from_sum
    ns = {"torch": torch}
    exec(block[block.index("torch.manual_seed("):block.index("# CMD-P + MyLC")], ns)  # the block's data, models
    K, N, steps, epochs, nets, opts = ns["K"], ns["N"], ns["steps"], ns["epochs"], ns["nets"], ns["opts"]
    method = Method()
    assert (method.mode, method.lc) == ("progressive", "mylc")
    precision = Precision(dict(device_type="cpu", enabled=False), torch.amp.GradScaler("cpu", enabled=False))
    names = sum_names(2)
    r = [torch.zeros(()), torch.zeros(())]  # as a fresh run of train.py starts
    assert len(rows) == epochs * steps
    off, taught = {}, []  # (epoch, step, what) -> |the block's number - the project's|; the project's counts
    for epoch in range(epochs):
        acc = torch.zeros(len(names))
        for step, batch in enumerate(ns["batches"]):
            row = rows[epoch * steps + step]
            clock = Clock(epoch, step, steps, epochs, 0)
            chi = method.chi_at(clock.t, epochs, K)
            assert abs(row["chi"] - chi) < 1e-12 and (row["epoch"], row["step"]) == (epoch, step)
            off.update({(epoch, step, f"r_{x}"): abs(row["r"][k] - float(r[k])) for k, x in enumerate("ab")})
            sums, _ = mutual_step(nets, opts, (*batch, batch[1]), method, chi, r, clock, precision)
            acc += sums
            n = sums[names.index("samples")]
            off.update({(epoch, step, f"loss_{x}"): abs(row[f"loss_{x}"] - float(sums[names.index(f"loss_{x}")] / n))
                        for x in "ab"})
            taught.append([int(sums[names.index(f"selected_{d}")]) for d in ("b2a", "a2b")])
        # train.py's r for the next epoch, from the epoch's sums
        r = train.confidence_from_sum([acc[names.index(f"entropy_{x}")] for x in "ab"],
                                      acc[names.index("samples")].item(), K)
    # The whole run, not the first step off: r passes rho, so in the last epochs MyLC moves the targets by
    # ε >= l(p)/2, and a mistake in them (swapped, r ignored, another rho) moves the losses by 1e-3 or more.
    assert min(rows[-1]["r"]) > method.mylc_rho
    assert any(sum(row["taught"]) for row in rows) and not all(sum(row["taught"]) == 2 * N for row in rows)
    worst = max(off, key=off.get)
    assert off[worst] < TOL, f"{worst}: off by {off[worst]:.2g}, {off[worst] / TOL:.3g} x the tolerance"
    assert [row["taught"] for row in rows] == taught


TEN_CLASSES = """import json, math
import torch
import torch.nn.functional as F
from cmdloss import chi, cmd_loss, confidence_from_sum, entropy, mylc

# ten classes from a random linear map, 40% of the labels flipped to another class; the README block's loop
torch.manual_seed(0)
K, D, N, steps, epochs, rate = 10, 16, 64, 16, 6, 0.4
xs, w = torch.randn(steps, N, D), torch.randn(D, K)
batches = []
for x in xs:
    y = (x @ w).argmax(-1)
    flip = torch.rand(N) < rate
    batches.append((x, torch.where(flip, (y + torch.randint(1, K, (N,))) % K, y)))
for eta in (4.0, 2.0):
    torch.manual_seed(1)
    nets = [torch.nn.Sequential(torch.nn.Linear(D, 64), torch.nn.ReLU(), torch.nn.Linear(64, K)) for _ in range(2)]
    opts = [torch.optim.SGD(net.parameters(), lr=0.3, momentum=0.9) for net in nets]
    r = [0.0, 0.0]
    for epoch in range(epochs):
        h_sums, n, taught = [0.0, 0.0], 0, [0, 0]
        for step, (x, y) in enumerate(batches):
            z = [net(x) for net in nets]
            p = [F.softmax(z_k, dim=-1).detach() for z_k in z]
            h = [entropy(p_k) for p_k in p]
            q = F.one_hot(y, K).float()
            q_tilde = [mylc(q, p[k], r[k], h=h[k]) for k in range(2)]
            threshold = chi(t=epoch + step / steps, total=epochs, num_classes=K, eta=eta, b=-5.0)
            loss_b2a, loss_a2b = cmd_loss(z[0], z[1], q_tilde[0], q_tilde[1], threshold)
            loss_a = F.cross_entropy(z[0], q_tilde[0]) + loss_b2a
            loss_b = F.cross_entropy(z[1], q_tilde[1]) + loss_a2b
            for opt in opts:
                opt.zero_grad()
            if epoch == 0 and step == 0:  # one backward a model: the same gradients as one of the sum
                loss_a.backward(retain_graph=True)
                loss_b.backward(retain_graph=True)
                apart = [p_.grad.clone() for net in nets for p_ in net.parameters()]
                for opt in opts:
                    opt.zero_grad()
            (loss_a + loss_b).backward()
            if epoch == 0 and step == 0:
                same = all(torch.equal(a, p_.grad) for a, p_ in zip(apart, (p_ for net in nets for p_ in net.parameters())))
            for opt in opts:
                opt.step()
            h_sums, n = [h_sums[k] + h[k].sum() for k in range(2)], n + len(y)
            taught = [taught[0] + int((h[1] < threshold).sum()), taught[1] + int((h[0] < threshold).sum())]
        print(json.dumps(dict(eta=eta, epoch=epoch, taught=[t / n for t in taught], mean_h=[float(s / n) for s in h_sums],
                              ceiling=chi(t=0, total=epochs, num_classes=K, eta=eta, b=-5.0), same=same)))
        r = confidence_from_sum(h_sums, n, K)
"""


def test_at_ten_classes_and_40_percent_noise_the_blocks_eta_teaches_little_and_eta_2_teaches(tmp_path):
    # the README's "When it teaches nothing" and "Choosing eta", with the file tools.cmdloss writes
    rows = run_alone(tmp_path, TEN_CLASSES, {"cmdloss.py": cmdloss.text()})
    h_r = -0.6 * math.log(0.6) - 0.4 * math.log(0.4 / 9)  # the noisy labels' entropy, 1.55 nats
    at = {eta: [row for row in rows if row["eta"] == eta] for eta in (4.0, 2.0)}
    assert round(h_r, 2) == 1.55 and round(at[4.0][0]["ceiling"], 2) == 1.06 and round(at[2.0][0]["ceiling"], 2) == 2.13
    for row in at[4.0]:  # the block's eta: χ's ceiling below H_r, and the predictions' mean H(p) near it
        assert max(row["taught"]) < 0.1, row
    assert all(row["ceiling"] < h_r - 0.3 < min(row["mean_h"]) for row in at[4.0][1:])
    for row in at[2.0][:2]:  # eta = 2: the ceiling above H_r, and a good part taught from the start
        assert min(row["taught"]) > 0.15, row
    assert all(row["same"] for row in rows)


def test_cmd_loss_alone_and_schedule_py_whole_give_the_objective_on_a_random_batch(tmp_path):
    assert imports(open(os.path.join(HERE, "schedule.py")).read()) <= {"math", "torch"}
    source = HEADER + "\n\n" + inspect.getsource(losses.cmd_loss)
    assert free_names(source) - {"math", "torch", "F"} - set(dir(builtins)) == set()
    g = torch.Generator().manual_seed(0)
    K, N = 10, 64
    z = [3 * torch.randn(N, K, generator=g) for _ in range(2)]
    y = torch.randint(0, K, (N,), generator=g)
    method, clock = Method(), Clock(epoch=3, batch=1, batches=4, epochs=10, seed=0)  # CMD-P + MyLC, Eq. 7 mid-way
    chi = method.chi_at(clock.t, clock.epochs, K)
    out = mutual.OBJECTIVES[method.mode](z, y, method, chi, [torch.tensor(0.4), torch.tensor(0.7)], clock)
    assert all(0 < m.mean() < 1 for m in out.taught.values())  # some samples teach, some do not
    torch.save(dict(z=z, q_tilde=out.q_tilde), tmp_path / "batch.pt")
    script = f"""import json
import torch
import torch.nn.functional as F
from copied_loss import cmd_loss
from copied_schedule import chi
batch = torch.load("batch.pt", weights_only=True)
(z_a, z_b), (q_a, q_b) = batch["z"], batch["q_tilde"]
threshold = chi({clock.t!r}, {clock.epochs}, {K}, {method.eta!r}, {method.b!r})
loss_b2a, loss_a2b = cmd_loss(z_a, z_b, q_a, q_b, threshold)
print(json.dumps(dict(chi=threshold, loss_a=(F.cross_entropy(z_a, q_a) + loss_b2a).item(),
                      loss_b=(F.cross_entropy(z_b, q_b) + loss_a2b).item())))
"""
    files = {"copied_loss.py": source, "copied_schedule.py": open(os.path.join(HERE, "schedule.py")).read(),
             "batch.pt": None}
    got, = run_alone(tmp_path, script, files)
    assert got["chi"] == chi
    assert abs(got["loss_a"] - out.losses[0].item()) < 1e-6 and abs(got["loss_b"] - out.losses[1].item()) < 1e-6


def imports(source):
    """Top-level names a module imports."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add(node.module.split(".")[0])
    return found


def test_noise_py_copied_whole_gives_the_projects_noisy_labels(tmp_path):
    """The README's copy section: noise.py, copied whole, needs numpy alone (beside Python's own modules)."""
    source = open(os.path.join(HERE, "noise.py")).read()
    assert imports(source) - sys.stdlib_module_names <= {"numpy"}
    labels = list(range(10)) * 20
    script = f"""import json
from noise import add_noise
print(json.dumps([add_noise({labels!r}, kind, 0.4, 10, seed=3).tolist() for kind in ("sym", "pair")]))
"""
    got, = run_alone(tmp_path, script, {"noise.py": source})
    assert got == [noise.add_noise(labels, kind, 0.4, 10, seed=3).tolist() for kind in ("sym", "pair")]
