"""The house rules: Method is the one source of the method's flags, the paper's names are accepted, the
paper's files import no machinery, shared flags are defined once, train.py's functions stay small."""
import ast
import dataclasses
import glob
import importlib
import inspect
import json
import os

import pytest
from test_train import TINY, metrics

import mutual
from mutual import Method
from training import config
from training.report import epoch_line
from training.synthetic import Synthetic

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root
PAPER = ("losses", "schedule", "label_correction", "noise", "mutual", "models", "appendix_code")


def actions():
    return {a.dest: a for a in config.parser()._actions}


def test_every_method_flag_takes_its_default_and_help_from_method():
    flags = actions()
    for f in dataclasses.fields(Method):
        a = flags[f.name]
        assert a.help.startswith(f.metadata["help"]), f.name
        if f.name in ("lc", "eta", "b"):  # these default per --mode; resolve fills them
            assert a.default is None
        else:
            assert a.default == f.default, f.name
    args = config.resolve(config.get_args(["--dataset", "synthetic"]))
    assert Method(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Method)}) == Method()


def test_changing_a_default_in_method_changes_the_flag(monkeypatch):
    monkeypatch.setattr(Method.__dataclass_fields__["ls_eps"], "default", 0.125)
    monkeypatch.setattr(Method.__dataclass_fields__["mode"], "default", "static")
    args = config.resolve(config.get_args(["--dataset", "synthetic"]))
    assert args.ls_eps == 0.125 and args.mode == "static" and args.eta == mutual.THRESHOLDS["static"][0]


def test_a_method_knob_is_checked_by_its_own_rule(capsys):
    with pytest.raises(SystemExit) as e:
        config.resolve(config.get_args(["--dataset", "synthetic", "--ls-eps", "1.5"]))
    assert e.value.code == 2 and "--ls-eps 1.5: must be in [0, 1]" in capsys.readouterr().err


@pytest.mark.parametrize("given,mode", [("cmd-s", "static"), ("CMD-S", "static"), ("CMD-P", "progressive"),
                                        ("Cmd-p", "progressive"), ("Zero", "zero"), ("MKD", "mkd")])
def test_the_papers_names_of_the_modes_are_accepted_in_any_case(given, mode):
    args = config.resolve(config.get_args(["--dataset", "synthetic", "--mode", given]))
    assert args.mode == mode and f"-{mode}-" in os.path.basename(args.out)


def test_an_alias_names_the_run_and_resumes_it_as_the_canonical_mode(tmp_path):
    import train
    out = str(tmp_path / "run")
    train.main(TINY + ["--mode", "CMD-S", "--epochs", "1", "--out", out])
    assert json.load(open(os.path.join(out, "config.json")))["mode"] == "static"
    # --resume compares the settings: the alias in another case is the same run, finished, nothing to do
    summary = train.main(TINY + ["--mode", "cmd-s", "--epochs", "1", "--out", out, "--resume"])
    assert summary == json.load(open(os.path.join(out, "summary.json"))) and len(metrics(out)) == 1


def test_an_unknown_mode_is_still_refused(capsys):
    with pytest.raises(SystemExit) as e:
        config.get_args(["--mode", "cmd-x"])
    assert e.value.code == 2 and "cmd-x" in capsys.readouterr().err


def row(sel_b2a, sel_a2b, prec=(0.5, 1.0)):
    return dict(epoch=3, lr=0.05, train_loss_a=1.0, train_loss_b=1.0, noise_rate=0.4, chi=0.2, selected_b2a=sel_b2a,
                selected_a2b=sel_a2b, precision_b2a=prec[0], precision_a2b=prec[1], test_acc_a=50.0, test_acc_b=51.0,
                test_acc_mean=50.5, seconds=1.0)


def test_the_epoch_line_shows_a_few_selected_samples_as_below_a_hundredth():
    line = epoch_line(row(0.004, 0.0))
    assert "sel b2a <0.01 a2b 0.00" in line and "prec 0.50 1.00" in line
    assert "sel b2a 0.01 a2b 0.50" in epoch_line(row(0.005, 0.5))


def imports(path):
    """The modules a file imports: top-level names of import and from-import statements, anywhere in it."""
    tree = ast.parse(open(path).read())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_the_papers_files_import_no_machinery():
    for name in PAPER:
        got = imports(os.path.join(HERE, f"{name}.py"))
        assert not got & {"training", "tools", "train", "evaluate"}, (name, got)
        assert not got & {"datasets", "config", "rundir", "safe_pickle", "sweep", "bench"}, (name, got)


def test_training_never_imports_tools_or_the_entry_points():
    for path in glob.glob(os.path.join(HERE, "training", "*.py")):
        assert not imports(path) & {"tools", "train", "evaluate"}, path
    for path in glob.glob(os.path.join(HERE, "tools", "*.py")):
        assert not imports(path) & {"train", "evaluate"}, path  # tools run train.py as a program


def test_no_import_cycle_among_the_projects_modules():
    files = {f"{os.path.basename(os.path.dirname(p))}.{os.path.basename(p)[:-3]}" if os.path.dirname(p) != HERE
             else os.path.basename(p)[:-3]: p
             for p in glob.glob(os.path.join(HERE, "*.py")) + glob.glob(os.path.join(HERE, "t*", "*.py"))
             if "/tests/" not in p and not p.endswith("test_cmd.py")}
    edges = {}
    for mod, path in files.items():
        deps = set()
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                base = node.module
                deps |= {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in files} or {base}
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names}
        edges[mod] = {d for d in deps if d in files and d != mod}
    state = {}

    def visit(m, path):
        state[m] = "open"
        for d in edges[m]:
            assert state.get(d) != "open", f"import cycle: {' -> '.join(path + [d])}"
            if d not in state:
                visit(d, path + [d])
        state[m] = "done"

    for m in edges:
        if m not in state:
            visit(m, [m])


def test_device_flag_and_no_cuda_message_are_defined_once():
    code = {p: open(p).read() for p in glob.glob(os.path.join(HERE, "**", "*.py"), recursive=True)
            if "/tests/" not in p}
    assert sum(c.count('add_argument("--device"') for c in code.values()) == 1
    assert sum(c.count("sees no CUDA device") for c in code.values()) == 1


def parameters(node):
    """The parameters a function takes, self and cls aside."""
    a = node.args
    return len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) - int(bool(a.args) and a.args[0].arg in ("self", "cls"))


def functions(paths):
    """(path, node) of every function defined in these files."""
    for path in paths:
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.FunctionDef):
                yield path, node


def test_no_function_outside_the_tests_takes_more_than_eight_parameters():
    paths = [p for p in glob.glob(os.path.join(HERE, "**", "*.py"), recursive=True)
             if "/tests/" not in p and "/sweeps/" not in p]
    for path, node in functions(paths):
        assert parameters(node) <= 8, f"{os.path.relpath(path, HERE)}:{node.name} takes {parameters(node)}"


def test_mutual_py_opens_with_the_method():
    tree = ast.parse(open(os.path.join(HERE, "mutual.py")).read())
    first = next(n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)))
    assert first.name == "cmd_objective"


def test_no_function_of_train_py_or_training_takes_more_than_six_parameters():
    paths = [os.path.join(HERE, "train.py")] + glob.glob(os.path.join(HERE, "training", "*.py"))
    for path, node in functions(paths):
        assert parameters(node) <= 6, f"{os.path.basename(path)}:{node.name} takes {parameters(node)} parameters"


def test_train_main_reads_on_one_screen():
    tree = ast.parse(open(os.path.join(HERE, "train.py")).read())
    main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
    assert main.end_lineno - main.lineno + 1 <= 45


def test_the_root_holds_the_paper_and_the_entry_points():
    py = sorted(f[:-3] for f in os.listdir(HERE) if f.endswith(".py"))
    assert set(py) <= set(PAPER) | {"train", "evaluate", "test_cmd", "baselines"}, py
    for folder in ("training", "tools", "tests"):
        assert os.path.isfile(os.path.join(HERE, folder, "__init__.py")) or folder == "tests"


def test_every_import_inside_a_function_says_why():
    paths = glob.glob(os.path.join(HERE, "*.py")) + glob.glob(os.path.join(HERE, "training", "*.py")) + \
        glob.glob(os.path.join(HERE, "tools", "*.py"))
    for path in paths:
        lines = open(path).read().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, ast.FunctionDef):
                for inner in ast.walk(node):
                    if isinstance(inner, (ast.Import, ast.ImportFrom)):
                        line = lines[inner.lineno - 1]
                        above = lines[inner.lineno - 2].strip()
                        assert "#" in line or above.startswith("#"), f"{os.path.basename(path)}:{inner.lineno}: {line}"


# (function, its parameter, the Method field train.py passes for it): a copied function gives train.py's number
COPYABLE_DEFAULTS = [
    ("label_correction.proselflc", "transit", "proselflc_transit"), ("label_correction.mylc", "rho", "mylc_rho"),
    ("label_correction.tfkd_reg_loss", "a", "tfkd_a"), ("label_correction.tfkd_reg_loss", "T", "tfkd_t"),
    ("label_correction.tfkd_reg_loss", "alpha", "tfkd_alpha"),
    ("label_correction.tfkd_reg_loss", "multiplier", "tfkd_multiplier"),
    ("label_correction.gce_loss", "gce_q", "gce_q"), ("losses.kdcl_loss", "T", "kdcl_t"),
    ("losses.kdcl_loss", "lam", "kdcl_lambda"), ("losses.kdcl_cohort_loss", "T", "kdcl_t"),
    ("losses.kdcl_cohort_loss", "lam", "kdcl_lambda"),
]


def test_every_default_of_a_copyable_function_is_the_one_train_py_runs():
    defaults = {f.name: f.default for f in dataclasses.fields(Method)}
    for path, param, field in COPYABLE_DEFAULTS:
        module, name = path.split(".")
        fn = getattr(importlib.import_module(module), name)
        assert inspect.signature(fn).parameters[param].default == defaults[field], (path, param, field)
    # and no other parameter of these functions carries a default that Method does not hold
    for module in ("label_correction", "losses"):
        for name, fn in inspect.getmembers(importlib.import_module(module), inspect.isfunction):
            for param in inspect.signature(fn).parameters.values():
                if isinstance(param.default, float) and not isinstance(param.default, bool):
                    assert (f"{module}.{name}", param.name) in {(p, a) for p, a, _ in COPYABLE_DEFAULTS}, \
                        f"{module}.{name}({param.name}={param.default}) is a default Method does not hold"


def test_the_synthetic_flags_take_the_data_sets_own_defaults():
    args = config.get_args([])
    for field, default in Synthetic._field_defaults.items():
        if field != "seed":  # the run's --seed
            assert getattr(args, f"synthetic_{field}") == default


def test_the_method_and_the_trainer_use_the_comparators_only_through_the_table_of_objectives():
    for name in ("mutual.py", "train.py"):
        tree = ast.parse(open(os.path.join(HERE, name)).read())
        imports = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        from_baselines = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "baselines"]
        used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                and n.value.id == "baselines"}
        assert not from_baselines and used <= {"objective"}, (name, used)
        assert ("baselines" in imports) == (name == "mutual.py")  # mutual.OBJECTIVES; train.py not at all


def test_no_global_is_reassigned_outside_the_tests():
    for path in glob.glob(os.path.join(HERE, "**", "*.py"), recursive=True):
        if "/tests/" in path or "/sweeps/" in path:
            continue
        source = open(path).read()
        assert not any(isinstance(n, ast.Global) for n in ast.walk(ast.parse(source))), os.path.relpath(path, HERE)
