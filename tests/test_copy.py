"""What a user copies runs alone and trains what train.py trains.

docs/copy.md's block, with the functions it says to paste (the file `python -m tools.cmdloss` writes), runs in a
fresh interpreter in an empty directory, and its line per epoch (χ, taught fractions, mean H(p), r, the taught
targets' precision, losses) follows mutual_step (CMD-P + MyLC, Method's defaults) and train.py's r, over a run
long enough for r to pass rho; without clean labels it prints the same line less the precision; stopped after
epoch 3 and resumed by the page's lines, it prints the same lines. The README's copy section holds the same block.
losses.cmd_loss pasted alone below `import math, torch, F`, and schedule.py copied whole, give the objective's
numbers on a random batch; the noise's file `tools.cmdloss --noise` writes gives the project's noisy labels. The
page's picture of the η rule is drawn again by the command it shows, from schedule.chi.
"""
import ast
import builtins
import inspect
import json
import math
import os
import re
import shlex
import subprocess
import symtable
import sys

import numpy as np
import pytest
import torch

import label_correction
import losses
import mutual
import noise
import schedule
from mutual import Clock, Method, Precision, mutual_step, sum_names
from test_house import legend
from tools import cmdloss

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root
GUIDE = os.path.join(HERE, "docs", "copy.md")
HEADER = "import math\n\nimport torch\nimport torch.nn.functional as F\n"  # all a pasted function may import
MODULES = {"schedule.py": schedule, "losses.py": losses, "label_correction.py": label_correction}
TOL = 1e-5
LINE = re.compile(r"epoch +(?P<epoch>\d+) \| chi (?P<chi>\S+) \| taught b2a (?P<taught_b2a>\S+) a2b (?P<taught_a2b>\S+) \| "
                  r"mean H\(p\) (?P<h_a>\S+) (?P<h_b>\S+) \| r (?P<r_a>\S+) (?P<r_b>\S+)"
                  r"(?: \| precision b2a (?P<precision_b2a>\S+) a2b (?P<precision_a2b>\S+))? \| loss (?P<loss_a>\S+) "
                  r"(?P<loss_b>\S+)")


def blocks_in(path, heading, lang="python"):
    """The ```lang blocks of the section of the Markdown file at path that starts with `heading`."""
    text = open(path).read()
    section = text[text.index(heading + "\n"):]
    section = section[:section.index("\n## ")] if "\n## " in section else section
    return re.findall(rf"```{lang}\n(.*?)```", section, re.S)


def guide_block():
    """The one Python block of docs/copy.md's "The loop"."""
    blocks = blocks_in(GUIDE, "## The loop")
    assert len(blocks) == 1, f"docs/copy.md's loop has {len(blocks)} Python blocks, not one"
    return blocks[0]


def pasted(block):
    """[(file, function, lines)] that the block's comments say to paste, the total they state, and the lines of
    the whole file it states."""
    listed = [(f, name, int(n)) for f, names in re.findall(r"^#\s+(\w+\.py): (.+)$", block, re.M)
              for name, n in re.findall(r"(\w+) \((\d+) lines\)", names)]
    total = int(re.search(r"functions of this repository, decorators included \((\d+) lines\):", block).group(1))
    whole = int(re.search(r"writes \((\d+) lines\)", block).group(1))
    return listed, total, whole


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


def run_alone(tmp_path, script, files, writes=()):
    """Run script in a fresh interpreter, cwd = tmp_path holding only `files` (None: already there), without this
    repository on its path; it may write the files named in writes. Returns the lines it prints."""
    for name, text in files.items():
        if text is not None:
            (tmp_path / name).write_text(text)
    (tmp_path / "main.py").write_text(script)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    res = subprocess.run([sys.executable, "-E", "-s", "main.py"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=240)
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__") == sorted([*files, *writes, "main.py"])
    return res.stdout.splitlines()


def run_json(tmp_path, script, files):
    """run_alone's lines, each a JSON value."""
    return [json.loads(line) for line in run_alone(tmp_path, script, files)]


def variants(block):
    """The block as pasted; without clean labels; stopped after epoch 3 with the page's saving lines; resumed by
    the page's resuming lines. One script: each copy seeds and builds its own data and models."""
    save, resume = blocks_in(GUIDE, "## Resume")
    lines = block.splitlines(True)
    after = next(line for line in lines if line.startswith("    r = confidence_from_sum("))  # the epoch's end
    start = next(line for line in lines if line.startswith("r = [0.0, 0.0]")) + "for epoch in range(epochs):\n"
    assert block.count(after) == 1 and block.count(start) == 1, "the loop's first or last lines moved"
    no_clean = block.replace("\n# CMD-P + MyLC\n", "\nbatches = [(x, y, None) for x, y, _ in batches]\n# CMD-P + MyLC\n")
    stopped = block.replace(after, after + save + "    if epoch + 1 == 3:\n        break\n")
    resumed = block.replace(after, after + save).replace(start, resume)
    assert no_clean != block and stopped != block and resumed != block
    return "\n".join([block, no_clean, stopped, resumed])


def quoted_lines():
    """The epoch lines docs/copy.md quotes below its block."""
    text = open(GUIDE).read()
    quote = text[text.index("It prints one line per epoch"):].split("```")[1]
    return [line for line in quote.splitlines() if line.startswith("epoch")]


def close(quoted, printed, digits=10):
    """The same line but for its numbers, each within `digits` units of its last printed decimal."""
    a, b = (re.split(r"(-?\d+\.\d+)", line) for line in (quoted, printed))
    return len(a) == len(b) and all(x == y if i % 2 == 0 else abs(float(x) - float(y)) <= digits * 10 ** -len(
        x.split(".")[1]) for i, (x, y) in enumerate(zip(a, b)))


def test_the_readme_holds_docs_copy_md_s_block():
    readme = blocks_in(os.path.join(HERE, "README.md"), "## Copy the loss")
    assert readme == [guide_block()], "the README's copy block differs from docs/copy.md's"


@pytest.mark.slow  # a process of its own: the second tier (python -m pytest -q -m slow lab tests)
def test_the_guides_block_runs_as_pasted_and_trains_what_train_py_trains(tmp_path):
    block = guide_block()
    listed, total, whole = pasted(block)
    sources = []
    for file, name, lines in listed:
        source = inspect.getsource(getattr(MODULES[file], name))
        assert len(source.splitlines()) == lines, f"docs/copy.md says {file}:{name} has {lines} lines"
        sources.append(source)
    assert sum(n for _, _, n in listed) == total
    names = {name for _, name, _ in listed}
    assert {"cmd_loss", "chi", "mylc", "confidence_from_sum"} <= names
    assert [name for _, name, _ in listed] == [name for _, name in cmdloss.FUNCTIONS]
    module = cmdloss.text()  # what `python -m tools.cmdloss cmdloss.py` writes: the notice, then the functions
    assert len(module.splitlines()) == whole, f"docs/copy.md says the file has {whole} lines"
    license_text = open(os.path.join(HERE, "LICENSE")).read()
    assert module.startswith("# MIT License\n") and all(f"# {line}".rstrip() in module for line in license_text.splitlines())
    assert module.endswith(HEADER + "".join(f"\n\n{s}" for s in sources))
    missing = free_names(module) - names - {"math", "torch", "F"} - set(dir(builtins))
    assert not missing, f"the pasted functions also need {missing}"
    imported = re.search(r"^from (\w+) import (.+)$", block, re.M)
    assert {n.strip() for n in imported.group(2).split(",")} <= names
    printed = run_alone(tmp_path, variants(block), {f"{imported.group(1)}.py": module}, writes=["cmd_state.pt"])
    rows = [LINE.fullmatch(line) for line in printed]
    assert all(rows), [line for line, row in zip(printed, rows) if not row]
    rows = [row.groupdict() for row in rows]
    quoted = quoted_lines()  # the page quotes the block's lines; another machine may move their last digits
    assert len(quoted) == len(rows) // 3 and all(close(q, p) for q, p in zip(quoted, printed)), (quoted, printed)
    words = {re.sub(r" +[-\d.]+| [ab]2[ab]", "", field).strip() for field in printed[0].split(" | ")}
    assert words <= set(legend()), f"the block says {words - set(legend())}, which docs/training.md's legend lacks"

    # The same data and models, trained by the project: mutual_step with Method's defaults, train.py's r.
    import train  # imported here, as the other tests do: its r function, which tools.batched shares
    from tools import batched
    assert train.confidence_from_sum is batched.confidence_from_sum is label_correction.confidence_from_sum
    ns = {"torch": torch}
    exec(block[block.index("torch.manual_seed("):block.index("# CMD-P + MyLC")], ns)  # the block's data, models
    K, steps, epochs, nets, opts = ns["K"], ns["steps"], ns["epochs"], ns["nets"], ns["opts"]
    method = Method()
    assert (method.mode, method.lc) == ("progressive", "mylc")
    precision = Precision(dict(device_type="cpu", enabled=False), torch.amp.GradScaler("cpu", enabled=False))
    names = sum_names(2)
    r = [torch.zeros(()), torch.zeros(())]  # as a fresh run of train.py starts
    assert len(rows) == 3 * epochs  # as pasted; without clean labels; stopped after epoch 3, then resumed from 4
    pasted_rows, no_clean, resumed = rows[:epochs], rows[epochs:2 * epochs], rows[2 * epochs:]
    off, exact = {}, []  # (epoch, what) -> |the block's number - the project's|; (the block's, the project's)
    for epoch in range(epochs):
        acc = torch.zeros(len(names))
        for step, batch in enumerate(ns["batches"]):
            clock = Clock(epoch, step, steps, epochs, 0)
            chi = method.chi_at(clock.t, epochs, K)
            sums, _ = mutual_step(nets, opts, batch, method, chi, r, clock, precision)
            acc += sums
        row, n = pasted_rows[epoch], acc[names.index("samples")].item()
        taught = {d: int(acc[names.index(f"selected_{d}")]) for d in ("b2a", "a2b")}
        right = {d: int(acc[names.index(f"clean_{d}")]) for d in ("b2a", "a2b")}  # train.py's precision, counted
        exact += [(row["epoch"], str(epoch + 1)), (row["chi"], f"{chi:.4f}")]
        exact += [(row[f"taught_{d}"], f"{taught[d] / n:.4f}") for d in ("b2a", "a2b")]
        exact += [(row[f"precision_{d}"], f"{right[d] / taught[d]:.3f}" if taught[d] else "-") for d in ("b2a", "a2b")]
        for k, x in enumerate("ab"):  # printed to 4 decimals (losses to 6): the rounding, then TOL
            off[(epoch, f"r_{x}")] = abs(float(row[f"r_{x}"]) - float(r[k])) - 5e-5
            off[(epoch, f"h_{x}")] = abs(float(row[f"h_{x}"]) - acc[names.index(f"entropy_{x}")].item() / n) - 5e-5
            off[(epoch, f"loss_{x}")] = abs(float(row[f"loss_{x}"]) - acc[names.index(f"loss_{x}")].item() / n) - 5e-7
        # train.py's r for the next epoch, from the epoch's sums
        r = train.confidence_from_sum([acc[names.index(f"entropy_{x}")] for x in "ab"], n, K)
    assert [got for got, _ in exact] == [want for _, want in exact]
    # The whole run, not the first step off: r passes rho, so in the last epochs MyLC moves the targets by
    # ε >= l(p)/2, and a mistake in them (swapped, r ignored, another rho) moves the losses by 1e-3 or more.
    assert min(float(v) for v in (pasted_rows[-1]["r_a"], pasted_rows[-1]["r_b"])) > method.mylc_rho
    taught = [float(row[f"taught_{d}"]) for row in pasted_rows for d in ("b2a", "a2b")]
    assert max(taught) > 0.1 and max(taught) < 0.9  # some taught, never the whole batch
    assert any(row["precision_b2a"] not in ("-", "1.000") for row in pasted_rows)  # a wrong target among the taught
    worst = max(off, key=off.get)
    assert off[worst] < TOL, f"{worst}: off by {off[worst]:.2g} beyond the rounding, {off[worst] / TOL:.3g} x the tolerance"
    # without clean labels: the same line less the precision; stopped and resumed: the same lines
    assert all(row["precision_b2a"] is None for row in no_clean)
    assert no_clean == [{**row, "precision_b2a": None, "precision_a2b": None} for row in pasted_rows]
    assert resumed == pasted_rows  # epochs 1-3 until stopped, then 4 on from the saved state


TEN_CLASSES = """import json, math
import torch
import torch.nn.functional as F
from cmdloss import chi, cmd_loss, confidence_from_sum, entropy, mylc

# ten classes from a random linear map, 40% of the labels flipped to another class; docs/copy.md's loop
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


@pytest.mark.slow  # a process of its own: the second tier (python -m pytest -q -m slow lab tests)
def test_at_ten_classes_and_40_percent_noise_the_blocks_eta_teaches_little_and_eta_2_teaches(tmp_path):
    # docs/copy.md's "Reading the line" and "Choosing η", with the file tools.cmdloss writes
    rows = run_json(tmp_path, TEN_CLASSES, {"cmdloss.py": cmdloss.text()})
    h_r = -0.6 * math.log(0.6) - 0.4 * math.log(0.4 / 9)  # the noisy labels' entropy, 1.55 nats
    at = {eta: [row for row in rows if row["eta"] == eta] for eta in (4.0, 2.0)}
    assert round(h_r, 2) == 1.55 and round(at[4.0][0]["ceiling"], 2) == 1.06 and round(at[2.0][0]["ceiling"], 2) == 2.13
    for row in at[4.0]:  # the block's eta: χ's ceiling below H_r, and the predictions' mean H(p) near it
        assert max(row["taught"]) < 0.1, row
    assert all(row["ceiling"] < h_r - 0.3 < min(row["mean_h"]) for row in at[4.0][1:])
    for row in at[2.0][:2]:  # eta = 2: the ceiling above H_r, and a good part taught from the start
        assert min(row["taught"]) > 0.15, row
    # the numbers docs/copy.md quotes: η = 4 teaches 0.026-0.058 in epochs 2-3, η = 2 0.46-0.49 in epoch 2
    assert 0.02 < min(min(row["taught"]) for row in at[4.0][1:3]) and max(max(row["taught"]) for row in at[4.0][1:3]) < 0.06
    assert min(at[2.0][1]["taught"]) > 0.45
    guide = " ".join(open(GUIDE).read().split())
    assert "η = 4 teaches 0.026–0.058" in guide and "η = 2 teaches 0.46–0.49 in epoch 2" in guide
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
    got, = run_json(tmp_path, script, files)
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


def shown_cmdloss(tmp_path):
    """docs/copy.md's `python -m tools.cmdloss` command, its ~/myproject/ paths moved into tmp_path: its argv."""
    shown, = blocks_in(GUIDE, "# Copy the loss", lang="bash")
    line, = [line for line in shown.splitlines() if line.startswith("python -m tools.cmdloss ")]
    return [a.replace("~/myproject/", f"{tmp_path}/") for a in shlex.split(line)[3:]]


def test_the_noise_file_tools_cmdloss_writes_gives_the_projects_noisy_labels(tmp_path, capsys):
    """docs/copy.md's `--noise` file: noise.py whole under the notice, numpy alone (beside Python's own modules)."""
    argv = shown_cmdloss(tmp_path)
    assert cmdloss.main(argv) == 0
    capsys.readouterr()
    loss_file, noise_file = argv[0], argv[argv.index("--noise") + 1]
    assert open(loss_file).read() == cmdloss.text()
    source = open(noise_file).read()
    assert source == cmdloss.notice() + "# From the CMD reference implementation: noise.py, whole.\n" + \
        open(os.path.join(HERE, "noise.py")).read()
    assert imports(source) - sys.stdlib_module_names <= {"numpy"}
    labels = list(range(10)) * 20
    script = f"""import json
from {os.path.basename(noise_file)[:-3]} import add_noise
print(json.dumps([add_noise({labels!r}, kind, 0.4, 10, seed=3).tolist() for kind in ("sym", "pair")]))
"""
    run = tmp_path / "run"
    run.mkdir()
    got, = run_json(run, script, {os.path.basename(noise_file): source})
    assert got == [noise.add_noise(labels, kind, 0.4, 10, seed=3).tolist() for kind in ("sym", "pair")]


@pytest.mark.parametrize("kind", ["sym", "pair"])
def test_exact_noise_flips_exactly_r_of_each_class_and_the_default_each_sample_at_r(kind):
    """add_noise(exact=True): exactly round(0.4 n_c) samples of each class flipped, each to another class (pair: to
    c + 1), reproducibly; the default flips each sample on its own, so a class's realised rate varies around 0.4, as
    the guide says (binomially, one standard deviation sqrt(0.4 x 0.6 / 720) = 0.018 at 720 a class: over 50 draws of
    10 classes, within 10% of it); idn has no count to keep, and says so."""
    y = np.repeat(np.arange(10), [720] * 9 + [333])
    exact = noise.add_noise(y, kind, 0.4, 10, seed=5, exact=True)
    assert np.array_equal(exact, noise.add_noise(y, kind, 0.4, 10, seed=5, exact=True))
    for c in range(10):
        assert (exact[y == c] != c).sum() == round(0.4 * (y == c).sum())
    if kind == "pair":
        assert set(((exact - y) % 10)[exact != y]) == {1}
    else:  # a flip goes to each other class alike
        assert np.bincount(((exact - y) % 10)[exact != y], minlength=10)[1:].min() > 0.8 * (exact != y).sum() / 9
    even = np.repeat(np.arange(10), 720)
    rates = [(each[even == c] != c).mean() for seed in range(50)
             for each in [noise.add_noise(even, kind, 0.4, 10, seed=seed)] for c in range(10)]
    assert np.std(rates) == pytest.approx(math.sqrt(0.4 * 0.6 / 720), rel=0.1) and np.mean(rates) == pytest.approx(0.4,
                                                                                                              abs=0.003)
    with pytest.raises(ValueError, match="no exact count"):
        noise.add_noise(y, "idn", 0.4, 10, seed=0, inputs=np.zeros((len(y), 1, 2, 2), np.uint8), exact=True)


def test_the_guide_counts_the_noise_files_functions():
    """docs/copy.md names every function of noise.py, the file tools.cmdloss --noise copies whole, and their number."""
    import ast
    names = [n.name for n in ast.parse(open(os.path.join(HERE, "noise.py")).read()).body
             if isinstance(n, ast.FunctionDef)]
    guide = open(GUIDE).read()
    words = "zero one two three four five six seven eight nine ten eleven twelve".split()
    assert f"Its {words[len(names)]} functions" in guide and f"whole: {words[len(names)]} functions" in guide
    intro = guide[:guide.index("## The loop")]
    assert [n for n in names if f"`{n}`" not in intro] == []


def test_tools_cmdloss_checks_both_files_before_it_writes_either(tmp_path, capsys):
    argv = shown_cmdloss(tmp_path)
    loss_file, noise_file = argv[0], argv[argv.index("--noise") + 1]
    for name, bad in (("an existing noise file", [loss_file, "--noise", str(tmp_path / "there.py")]),
                      ("the same file twice", [loss_file, "--noise", loss_file]),
                      ("a missing folder", [loss_file, "--noise", str(tmp_path / "no" / "n.py")])):
        (tmp_path / "there.py").write_text("# yours\n")
        with pytest.raises(SystemExit) as e:
            cmdloss.main(bad)
        assert e.value.code == 2 and capsys.readouterr().err.count("\n") == 1, name
        assert not os.path.exists(loss_file) and open(tmp_path / "there.py").read() == "# yours\n", name
    assert cmdloss.main(argv) == 0 and os.path.exists(noise_file)
    with pytest.raises(SystemExit):
        cmdloss.main(argv)  # both exist now: refused, left as they are
    assert open(loss_file).read() == cmdloss.text()


def test_the_eta_rule_picture_is_drawn_again_from_schedule_chi_by_the_command_docs_copy_md_shows(tmp_path, monkeypatch):
    from PIL import Image

    from tools import plot
    guide = open(GUIDE).read()
    cmd = shlex.split(re.search(r"`(python -m tools\.plot --eta-rule[^`]*)`", guide).group(1))
    assert "](eta-rule.png)" in guide
    figs, save = {}, plot.save

    def keep(plt, fig, path):
        figs[os.path.basename(path)] = fig
        return save(plt, fig, path)
    monkeypatch.setattr(plot, "save", keep)
    monkeypatch.chdir(HERE)
    assert plot.main(cmd[3:] + ["--out", str(tmp_path)]) == 0
    assert os.listdir(tmp_path) == ["eta-rule.png"]
    with Image.open(tmp_path / "eta-rule.png") as drawn, Image.open(os.path.join(HERE, "docs", "eta-rule.png")) as kept:
        assert drawn.size == kept.size
    # what it shows: χ of Eq. 7 for η = 1, 2, 4 and b = 0, -5 at K = 10 and 100; H_ν at ν = 0.2, 0.4, 0.6
    axes = figs["eta-rule.png"].axes
    assert len(axes) == 2
    for ax, k in zip(axes, (10, 100)):
        curves = [line for line in ax.get_lines() if line.get_label().startswith("η")]
        drawn = {(float(line.get_label().split()[2].rstrip(",")), line.get_linestyle()) for line in curves}
        assert drawn == {(eta, ls) for eta in (1.0, 2.0, 4.0) for ls in ("-", "--")}
        for line in curves:
            eta = float(line.get_label().split()[2].rstrip(","))
            b = 0.0 if line.get_linestyle() == "--" else -5.0
            t = line.get_xdata()
            assert t[0] == 0 and t[-1] == 1 and list(line.get_ydata()) == [schedule.chi(x, 1.0, k, eta, b) for x in t]
        levels = sorted(line.get_ydata()[0] for line in ax.get_lines() if line not in curves)
        want = [-(1 - v) * math.log(1 - v) - v * math.log(v / (k - 1)) for v in (0.2, 0.4, 0.6)]
        assert levels == pytest.approx(want, rel=1e-12)


def test_the_guides_eta_to_start_with_is_schedules_rule_at_cmd_ps_b():
    """docs/copy.md's table of H_ν, the bound and the η to start with, per noise kind, K and ν: schedule.noise_entropy,
    eta_bound and eta_start at train.py's b for CMD-P; χ at the start η starts at least a third above H_ν; and H_ν is
    the closed form of each kind's rows, written here from the guide's formulas."""
    b = mutual.THRESHOLDS["progressive"][1]
    rows = re.findall(r"^\| (sym|pair|idn) \| (\d+) \| (0\.\d) \| (\d\.\d\d) \| (\d+\.\d) \| ([\d.]+) \|$",
                      open(GUIDE).read(), re.M)
    assert [r[0] for r in rows] == ["sym"] * 6 + ["pair"] * 4 + ["idn"] * 4
    closed = dict(sym=lambda nu, k: -(1 - nu) * math.log(1 - nu) - nu * math.log(nu / (k - 1)),
                  pair=lambda nu, k: -(1 - nu) * math.log(1 - nu) - nu * math.log(nu))
    for kind, k, nu, h, bound, start in rows:
        k, nu = int(k), float(nu)
        assert f"{schedule.noise_entropy(nu, k, kind):.2f}" == h and f"{schedule.eta_bound(k, nu, b, kind):.1f}" == bound
        assert f"{schedule.eta_start(k, nu, b, kind):g}" == start
        assert schedule.chi(0, 1, k, float(start), b) >= 4 / 3 * schedule.noise_entropy(nu, k, kind)
        if kind in closed:
            assert schedule.noise_entropy(nu, k, kind) == pytest.approx(closed[kind](nu, k), rel=1e-12)


def test_idns_entropy_is_the_mean_entropy_of_the_rows_it_draws():
    """schedule.idn_entropy (a quadrature over the truncated normal of the flip rates) against the rows instance_rows
    draws for 20,000 random 28 x 28 images at 40%, K = 10: their mean entropy, within its Monte-Carlo error (at 784
    pixels of 0..255 a row's flip goes to one class; 16 pixels leave a few rows a second one, 0.002 nats above)."""
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (20000, 1, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, 20000)
    rows = noise.instance_rows(images, labels, 0.4, 10, rng)
    h = -(np.where(rows > 0, rows * np.log(np.where(rows > 0, rows, 1)), 0)).sum(1)
    assert abs(h.mean() - schedule.noise_entropy(0.4, 10, "idn")) < 3 * h.std() / math.sqrt(len(h))
    assert schedule.IDN_STD == inspect.signature(noise.instance_rows).parameters["std"].default
    for kind in ("sym", "pair"):  # the closed forms are their matrices' rows
        assert schedule.row_entropy(noise.transition_matrix(kind, 0.4, 10)) == pytest.approx(
            schedule.noise_entropy(0.4, 10, kind), rel=1e-12)


def accelerate_block(tmp_path):
    """docs/copy.md's Accelerate block, as main.py beside the cmdloss.py tools.cmdloss writes, in tmp_path."""
    block, = blocks_in(GUIDE, "## In Hugging Face Accelerate")
    (tmp_path / "cmdloss.py").write_text(cmdloss.text())
    return block


@pytest.mark.slow  # a process of its own: the second tier (python -m pytest -q -m slow lab tests)
def test_the_accelerate_block_in_one_process_prints_the_blocks_lines(tmp_path):
    """One process, no mixed precision: the Accelerate block's loader, reduce and gathered evaluation change no
    number of the block's own run; it prints the lines docs/copy.md quotes below the block, then its test count."""
    pytest.importorskip("accelerate")
    printed = run_alone(tmp_path, accelerate_block(tmp_path), {"cmdloss.py": None})
    quoted = quoted_lines()
    assert len(printed) == len(quoted) + 1
    assert all(close(q, p) for q, p in zip(quoted, printed)), "\n".join(printed)
    assert re.fullmatch(r"trained on 128 samples an epoch; test A \d+\.\d B \d+\.\d on 100 samples", printed[-1])


@pytest.mark.slow  # two processes of their own (torchrun, gloo on the CPU)
def test_the_accelerate_block_in_two_processes_sums_both_and_steps_by_its_own_loader(tmp_path):
    """torchrun --standalone --nproc-per-node 2, as docs/copy.md shows it: one line per epoch (the main process's),
    the epoch's counts summed over both processes (128 samples, where each trains on 64), the evaluation gathered
    from both (100 samples, where each holds 50 and one repeated one), and χ at t = epoch + step/steps with steps
    the prepared loader's 2 batches a process (at the last step of epoch 1, t = 0.5; the one-process block's is 0.75)."""
    pytest.importorskip("accelerate")
    block = accelerate_block(tmp_path)
    assert "torchrun --standalone --nproc-per-node 2 train_cmd_accelerate.py" in open(GUIDE).read()
    (tmp_path / "main.py").write_text(block)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"OMP_NUM_THREADS": "1"}
    res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          "main.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    printed = res.stdout.splitlines()
    lines = [LINE.match(line) for line in printed if line.startswith("epoch")]
    assert len(lines) == len(quoted_lines()) == len(printed) - 1 and all(lines)
    chi = [float(m["chi"]) for m in lines]
    assert chi[0] == pytest.approx(schedule.chi(0.5, len(lines), 10, 4.0, -5.0), abs=1e-4)
    assert chi[0] != pytest.approx(schedule.chi(0.75, len(lines), 10, 4.0, -5.0), abs=1e-4)
    assert re.fullmatch(r"trained on 128 samples an epoch; test A \d+\.\d B \d+\.\d on 100 samples", printed[-1])


def test_bf16_logits_move_r_little_and_a_bf16_sum_moves_it_more():
    """docs/copy.md's *Mixed precision*: over an epoch of 7,680 predictions at K = 10 (logits of spread 3), r from
    bf16-rounded logits with the entropies summed in float32 is within 1e-4 of the float32 path, though a sample's
    H(p) moves by up to about 0.01 nats; the same entropies summed in a bf16 accumulator move r by more than 1e-3."""
    g = torch.Generator().manual_seed(0)
    z = 3 * torch.randn(60, 128, 10, generator=g)  # 60 batches of 128
    k = 10
    h32 = torch.stack([losses.entropy(torch.softmax(b, -1)) for b in z])
    h16 = torch.stack([losses.entropy(torch.softmax(b.bfloat16().float(), -1)) for b in z])
    n = z.shape[0] * z.shape[1]
    r32, = label_correction.confidence_from_sum([h32.sum()], n, k)
    r16, = label_correction.confidence_from_sum([h16.sum()], n, k)
    assert 0.005 < (h16 - h32).abs().max() < 0.02
    assert abs(float(r16 - r32)) < 1e-4
    acc = torch.zeros((), dtype=torch.bfloat16)
    for b in h16:  # the epoch's sum kept in bf16, a batch's sum added each step
        acc += b.sum().bfloat16()
    r_acc, = label_correction.confidence_from_sum([acc.float()], n, k)
    assert abs(float(r_acc - r32)) > 1e-3
