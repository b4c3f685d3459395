"""The house rules: Method and Comparators are the one source of the method's flags, the paper's names are
accepted, the paper's files import no machinery, the reference (the root and training/) neither imports the lab nor
names a method of the comparison, shared flags are defined once, bad input is refused one way, and the paper's pair
(mutual.cmd_objective) reads on one screen."""
import ast
import dataclasses
import glob
import importlib
import inspect
import json
import os
import re

import pytest
from test_train import TINY, metrics

import mutual
import train
from mutual import Method
from training import config, runfiles
from training.errors import UserError
from training.report import LINE, epoch_line
from training.synthetic import Synthetic

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root
PAPER = ("losses", "schedule", "label_correction", "noise", "mutual", "models", "appendix_code")


def actions():
    return {a.dest: a for a in config.parser()._actions}


def knobs():
    """Every field of Method and Comparators that is a flag: all but Method.comparators, .noise and .state (the run's)."""
    return [f for kind in (Method, mutual.Comparators) for f in dataclasses.fields(kind) if "help" in f.metadata]


def test_every_method_flag_takes_its_default_and_help_from_method():
    flags = actions()
    for f in knobs():
        a = flags[f.name]
        assert a.help.startswith(f.metadata["help"]), f.name
        if f.name in ("lc", "eta", "b"):  # these default per --mode; resolve fills them
            assert a.default is None
        else:
            assert a.default == f.default, f.name
    args = config.resolve(config.get_args(["--dataset", "synthetic"]))
    assert config.method_of(args) == Method(noise=("sym", 0.4))  # and the run's noise, which the flags give it
    # and a mode's own setting reaches its field
    args = config.resolve(config.get_args(["--dataset", "synthetic", "--mode", "mkd", "--mkd-eps", "0.3"]))
    assert config.method_of(args).comparators.mkd_eps == 0.3


def test_the_modes_settings_are_not_the_papers_method_fields():
    paper = {f.name for f in dataclasses.fields(Method)}
    others = {f.name for f in dataclasses.fields(mutual.Comparators)}
    assert not paper & others and paper >= {"mode", "lc", "eta", "b", "mylc_b1", "mylc_rho"} and "mkd_eps" in others
    groups = {g.title.split()[0]: {a.dest for a in g._group_actions} for g in config.parser()._action_groups}
    assert groups["method"] == paper - {"comparators", "noise", "state"} and groups["settings"] == others


def test_changing_a_default_in_method_changes_the_flag(monkeypatch):
    monkeypatch.setattr(Method.__dataclass_fields__["ls_eps"], "default", 0.125)
    monkeypatch.setattr(Method.__dataclass_fields__["mode"], "default", "static")
    args = config.resolve(config.get_args(["--dataset", "synthetic"]))
    assert args.ls_eps == 0.125 and args.mode == "static" and args.eta == mutual.THRESHOLDS["static"][0]


def test_a_method_knob_is_checked_by_its_own_rule():
    with pytest.raises(UserError, match=r"--ls-eps 1.5: must be in \[0, 1\]"):
        config.resolve(config.get_args(["--dataset", "synthetic", "--lc", "ls", "--ls-eps", "1.5"]))


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


def test_an_unknown_mode_is_still_refused():
    with pytest.raises(UserError, match="cmd-x"):
        config.get_args(["--mode", "cmd-x"])


def test_the_epoch_line_shows_a_few_selected_samples_as_below_a_hundredth(tmp_path):
    train.main(TINY + ["--epochs", "1", "--out", str(tmp_path / "r")])  # a real run's row, whatever its keys are
    real = metrics(str(tmp_path / "r"))[0]

    def row(sel_b2a, sel_a2b, prec=(0.5, 1.0)):
        return dict(real, selected_b2a=sel_b2a, selected_a2b=sel_a2b, precision_b2a=prec[0], precision_a2b=prec[1])
    line = epoch_line(row(0.004, 0.0))
    assert "taught b2a <0.01 a2b 0.00" in line and "precision 0.50 1.00" in line
    assert "taught b2a 0.01 a2b 0.50" in epoch_line(row(0.005, 0.5))


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
        assert not got & {"training", "tools", "studies", "train", "evaluate"}, (name, got)
        assert not got & {"datasets", "config", "rundir", "safe_pickle", "sweep", "bench"}, (name, got)


def test_imports_run_one_way_the_paper_training_tools_then_the_projects_studies():
    for path in glob.glob(os.path.join(HERE, "training", "*.py")):
        assert not imports(path) & {"tools", "studies", "train", "evaluate"}, path
    for path in glob.glob(os.path.join(HERE, "tools", "*.py")):
        assert not imports(path) & {"studies", "train", "evaluate"}, path  # tools run train.py as a program
    for path in glob.glob(os.path.join(HERE, "studies", "*.py")):
        assert not imports(path) & {"train", "evaluate"}, path


def test_no_import_cycle_among_the_projects_modules():
    files = {f"{os.path.basename(os.path.dirname(p))}.{os.path.basename(p)[:-3]}" if os.path.dirname(p) != HERE
             else os.path.basename(p)[:-3]: p
             for p in glob.glob(os.path.join(HERE, "*.py")) + glob.glob(os.path.join(HERE, "t*", "*.py")) +
             glob.glob(os.path.join(HERE, "studies", "*.py"))
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


def test_bad_input_is_refused_one_way():
    """One Parser (training/errors.py) and one handler (errors.one_line): no other ArgumentParser subclass, and
    nothing outside the tests catches SystemExit or exits with a message of its own."""
    paths = [p for p in glob.glob(os.path.join(HERE, "**", "*.py"), recursive=True) if "/tests/" not in p]
    for path in paths:
        tree = ast.parse(open(path).read())
        where = os.path.relpath(path, HERE)
        for n in ast.walk(tree):
            if isinstance(n, ast.ClassDef) and any("ArgumentParser" in ast.unparse(b) for b in n.bases):
                assert where == os.path.join("training", "errors.py"), (where, n.name)
            if isinstance(n, ast.ExceptHandler) and n.type is not None:
                assert "SystemExit" not in ast.unparse(n.type), (where, n.lineno)
            if isinstance(n, ast.Call) and ast.unparse(n.func) in ("sys.exit", "SystemExit") and n.args:
                message = isinstance(n.args[0], ast.JoinedStr) or isinstance(getattr(n.args[0], "value", None), str)
                assert not message, (where, n.lineno)


def test_mutual_py_opens_with_the_method():
    tree = ast.parse(open(os.path.join(HERE, "mutual.py")).read())
    first = next(n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)))
    assert first.name == "cmd_objective"


def test_the_papers_pair_reads_on_one_screen_without_cohorts_or_controls():
    source = open(os.path.join(HERE, "mutual.py")).read()
    fn = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "cmd_objective")
    body = fn.body[1:] if isinstance(fn.body[0], ast.Expr) and isinstance(fn.body[0].value, ast.Constant) else fn.body
    lines = source.splitlines()[body[0].lineno - 1:fn.end_lineno]
    code = [line for line in lines if line.strip() and not line.strip().startswith("#")]
    assert len(code) <= 15, f"cmd_objective's body is {len(code)} lines"
    names = set()
    for stmt in body:
        for n in ast.walk(stmt):
            names |= {n.id} if isinstance(n, ast.Name) else {n.attr} if isinstance(n, ast.Attribute) else \
                {n.arg} if isinstance(n, ast.keyword) and n.arg else \
                {n.value} if isinstance(n, ast.Constant) and isinstance(n.value, str) else set()
    for word in ("cohort", "select", "peer_weight", "combinations", "draws"):
        assert not [n for n in names if word in n], (word, names)


def test_the_root_holds_the_paper_and_the_entry_points():
    py = sorted(f[:-3] for f in os.listdir(HERE) if f.endswith(".py"))
    # beside the paper: what its registries' entries declare (which the paper's files import)
    assert set(py) <= set(PAPER) | {"train", "evaluate", "test_cmd", "registry"}, py
    for folder in ("training", "lab", "tools", "studies", "tests"):
        assert os.path.isfile(os.path.join(HERE, folder, "__init__.py")) or folder == "tests"


def test_every_import_inside_a_function_says_why():
    paths = glob.glob(os.path.join(HERE, "*.py")) + glob.glob(os.path.join(HERE, "training", "*.py")) + \
        glob.glob(os.path.join(HERE, "tools", "*.py")) + glob.glob(os.path.join(HERE, "studies", "*.py"))
    for path in paths:
        lines = open(path).read().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, ast.FunctionDef):
                for inner in ast.walk(node):
                    if isinstance(inner, (ast.Import, ast.ImportFrom)):
                        line = lines[inner.lineno - 1]
                        above = lines[inner.lineno - 2].strip()
                        assert "#" in line or above.startswith("#"), f"{os.path.basename(path)}:{inner.lineno}: {line}"


COPYABLE = ("losses", "label_correction", "schedule")  # the modules whose functions a user copies
# Knobs of the paper's method whose copied functions must carry train.py's default (found below, never listed by hand)
PAPER_KNOBS = {"eta", "b", "mylc_b1", "mylc_rho", "ls_eps", "bootsoft_eps", "proselflc_b", "proselflc_transit", "cp_beta"}


def run_defaults():
    """{field: default} of Method, of the modes' Comparators and of any other dataclass of mutual.py holding a run's
    settings."""
    return {f.name: f.default for obj in [*vars(mutual).values(), mutual.Comparators]
            if isinstance(obj, type) and dataclasses.is_dataclass(obj)
            for f in dataclasses.fields(obj) if f.default is not dataclasses.MISSING}


def named(node):
    """The name an expression calls or holds: f for f and for module.f; None for anything else."""
    return node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)


def knob_parameters():
    """{(module.function, parameter): field} for every parameter of a copyable function that a run sets from a field:
    where a file of the project calls the function with `<settings>.<field>` for it, or where a copyable function
    passes its own parameter on to such a parameter (mkd_loss's eps to dml_loss's). A call through a dict of functions
    (SHAPES[name](t, self.eta)) is a call of each."""
    fields = run_defaults()
    fns = {name: (f"{module}.{name}", fn) for module in COPYABLE
           for name, fn in inspect.getmembers(importlib.import_module(module), inspect.isfunction)
           if fn.__module__ == module}
    found, passed_on = {}, []
    paths = [p for p in glob.glob(os.path.join(HERE, "*.py")) if not p.endswith("test_cmd.py")]
    tables = {t.id: [named(v) for v in n.value.values] for path in paths for n in ast.walk(ast.parse(open(path).read()))
              if isinstance(n, ast.Assign) and isinstance(n.value, ast.Dict) for t in n.targets
              if isinstance(t, ast.Name)}  # every dict of the root's files, by name: {name: what it holds}
    for path in paths:
        module = os.path.basename(path)[:-3]
        tree = ast.parse(open(path).read())
        aliases = {a.asname: a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names
                   if a.asname}  # a function imported under another name is still its own
        for outer in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.Lambda))]:  # registries' too
            own = {a.arg for a in outer.args.args + outer.args.kwonlyargs}
            for call in [n for n in ast.walk(outer) if isinstance(n, ast.Call)]:
                # f(...), module.f(...), or TABLE[key](...): a dispatch through a dict calls each function it holds
                table = named(call.func.value) if isinstance(call.func, ast.Subscript) else None
                for name in tables.get(table, []) if table else [named(call.func)]:
                    name = aliases.get(name, name)
                    if name not in fns:
                        continue
                    params = list(inspect.signature(fns[name][1]).parameters)
                    for param, arg in [*zip(params, call.args), *((k.arg, k.value) for k in call.keywords)]:
                        if isinstance(arg, ast.Attribute) and arg.attr in fields:
                            found[fns[name][0], param] = arg.attr
                        elif isinstance(arg, ast.Name) and arg.id in own and module in COPYABLE:
                            passed_on.append(((f"{module}.{getattr(outer, 'name', '<lambda>')}", arg.id),
                                              (fns[name][0], param)))
    for _ in passed_on:  # as often as there are links: wrappers of wrappers
        found.update({outer: found[inner] for outer, inner in passed_on if inner in found})
    return found


def test_every_copyable_function_takes_the_default_train_py_runs():
    """docs/paper-notes.md, "Values the paper does not give": every parameter of losses.py, label_correction.py and
    schedule.py that train.py sets from a field defaults to that field's default (schedule.chi's η and b to CMD-P's,
    Method's); no other parameter there has a numeric one."""
    defaults, knobs = run_defaults(), knob_parameters()
    assert PAPER_KNOBS <= set(knobs.values()), PAPER_KNOBS - set(knobs.values())
    for (path, param), field in knobs.items():
        module, name = path.split(".")
        default = inspect.signature(getattr(importlib.import_module(module), name)).parameters[param].default
        assert default == defaults[field], f"{path}({param}={default}): train.py runs {field} = {defaults[field]}"
    for module in COPYABLE:
        for name, fn in inspect.getmembers(importlib.import_module(module), inspect.isfunction):
            for param in inspect.signature(fn).parameters.values():
                if isinstance(param.default, (int, float)) and not isinstance(param.default, bool):
                    assert (f"{module}.{name}", param.name) in knobs, \
                        f"{module}.{name}({param.name}={param.default}) is a default no run sets"


def test_the_synthetic_flags_take_the_data_sets_own_defaults():
    args = config.get_args([])
    for field, default in Synthetic._field_defaults.items():
        if field != "seed":  # the run's --seed
            assert getattr(args, f"synthetic_{field}") == default


REFERENCE = [p for p in glob.glob(os.path.join(HERE, "*.py")) + glob.glob(os.path.join(HERE, "training", "*.py"))]
LAB = ("lab", "tools", "studies")  # what imports the reference, never the other way round
# the methods of the comparison (lab/methods/), which no name in the reference's code may carry
COMPARED = ("coteach", "jocor", "decoupl", "revision", "joint", "elr", "cdr", "mentornet", "apl", "dmi", "gce",
            "forward_loss", "anchor_transition", "kdcl", "tfkd")


def names_in(tree):
    """Every name a module's code gives or uses: definitions, arguments, variables, attributes, keywords, imports."""
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.ClassDef)):
            yield n.name
        elif isinstance(n, ast.arg):
            yield n.arg
        elif isinstance(n, ast.Name):
            yield n.id
        elif isinstance(n, ast.Attribute):
            yield n.attr
        elif isinstance(n, ast.keyword) and n.arg:
            yield n.arg
        elif isinstance(n, ast.alias):
            yield n.asname or n.name


def test_the_reference_imports_no_lab_and_names_no_method_of_the_comparison():
    """No .py file of the root or of training/ imports the lab (lab/, tools/, studies/), and none names a method CMD is
    compared with in its code (comments and docstrings may point to the lab): the reference knows only the paper."""
    assert len(REFERENCE) > 20
    for path in REFERENCE:
        tree = ast.parse(open(path).read())
        imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names] + \
            [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
        assert not [m for m in imported if m.split(".")[0] in LAB], (os.path.relpath(path, HERE), imported)
        named = {name for name in names_in(tree) if any(word in name.lower() for word in COMPARED)}
        assert not named, (os.path.relpath(path, HERE), named)


def test_no_global_is_reassigned_outside_the_tests():
    for path in glob.glob(os.path.join(HERE, "**", "*.py"), recursive=True):
        if "/tests/" in path or "/sweeps/" in path:
            continue
        source = open(path).read()
        assert not any(isinstance(n, ast.Global) for n in ast.walk(ast.parse(source))), os.path.relpath(path, HERE)


def test_every_entry_point_reports_bad_input_and_ctrl_c_through_the_one_handler():
    """train.py, evaluate.py and every python -m tools.NAME: main is decorated with training/errors.py's
    one_line, and no main but train.py's (whose Ctrl-C in training says where it stopped and how to resume)
    catches KeyboardInterrupt itself. tests/identity.py, a check of two checkouts that imports nothing of ours,
    aside."""
    paths = glob.glob(os.path.join(HERE, "*.py")) + glob.glob(os.path.join(HERE, "tools", "*.py")) + \
        glob.glob(os.path.join(HERE, "studies", "*.py"))
    mains = 0
    for path in paths:
        tree = ast.parse(open(path).read())
        main = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"), None)
        if main is None or os.path.basename(path) == "identity.py":
            continue
        mains += 1
        decorators = [d.func.id for d in main.decorator_list if isinstance(d, ast.Call) and isinstance(d.func, ast.Name)]
        assert decorators == ["one_line"], os.path.relpath(path, HERE)
        caught = {ast.unparse(h.type) for n in ast.walk(main) if isinstance(n, ast.Try) for h in n.handlers if h.type}
        assert path.endswith("train.py") or not any("KeyboardInterrupt" in c for c in caught), (path, caught)
    assert mains >= 7


def legend():
    """docs/training.md's legend of the epoch line: {word: [metrics.jsonl keys]}."""
    text = open(os.path.join(HERE, "docs", "training.md")).read()
    table = text[text.index("| word | metrics.jsonl key | what it is |"):].split("\n\n")[0].splitlines()[2:]
    return {re.match(r"\| `([^`]+)` \|", line).group(1): re.findall(r"`(\w+)`", line.split("|")[2]) for line in table}


def test_every_word_of_the_epoch_line_is_the_docs_legends(tmp_path):
    """One word per number: train.py's epoch line (from a real run) and runfiles.WORDS, which the plots and tables
    read, use the words of docs/training.md's legend, and each word there names the metrics.jsonl keys it stands
    for (tests/test_copy.py holds the copy block's line to the same legend)."""
    words = legend()
    out = str(tmp_path / "run")
    train.main(["--dataset", "synthetic", "--arch", "mlp", "--synthetic-size", "64", "--synthetic-test-size", "32",
                "--epochs", "1", "--device", "cpu", "--out", out])
    row = json.loads(open(os.path.join(out, "metrics.jsonl")).readline())
    line = epoch_line(row)
    said = [field.split()[0] for field in line.split(" | ")[:-1]] + [re.sub(r"[\d.]+", "", line.split(" | ")[-1])]
    assert said == [word for word, _ in LINE] + ["s"], line  # the line's columns, from their one declaration
    assert set(said) <= set(words) and set(runfiles.WORDS.values()) <= set(words)
    for key, word in runfiles.WORDS.items():  # each word stands for the keys its legend line names, and they exist
        assert words[word] and all(k == key or k.startswith(key + "_") for k in words[word]), (word, words[word])
        assert all(k in row for k in words[word] if not k.startswith("chi_")), (word, words[word])
