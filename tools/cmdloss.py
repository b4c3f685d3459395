"""The copied loss's files (docs/copy.md), written from this repository's own source under its licence notice:

    python -m tools.cmdloss ~/myproject/cmdloss.py                                  # then `from cmdloss import ...`
    python -m tools.cmdloss ~/myproject/cmdloss.py --noise ~/myproject/cmdnoise.py  # and the noise, in a file of its own

FUNCTIONS  -- the six functions the copied loop uses, in the order they are written
text       -- the loss's file: the MIT notice (LICENSE, as comments), three imports, each function's source as it is here
noise_text -- the noise's file: the notice, then noise.py whole: add_noise and transition_matrix read its registry,
              NOISE, so they do not copy alone, and it needs numpy, which the loss's file does not

What docs/copy.md's block runs beside (tests/test_copy.py runs it against exactly this file). The functions call
nothing else of this repository. Run it from this repository's root.
"""
import inspect
import os
import sys

import label_correction
import losses
import noise
import schedule
from training import runfiles
from training.errors import Parser, UserError, one_line

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FUNCTIONS = [(schedule, "logistic"), (schedule, "chi"), (losses, "entropy"), (losses, "cmd_loss"),
             (label_correction, "mylc"), (label_correction, "confidence_from_sum")]
HEADER = "import math\n\nimport torch\nimport torch.nn.functional as F\n"  # all the functions need


def notice():
    """LICENSE as comments, a line each."""
    with open(os.path.join(HERE, "LICENSE")) as f:
        return "".join(f"# {line}".rstrip() + "\n" for line in f)


def text():
    """The loss's file: the notice, the imports, the functions."""
    origin = "# From the CMD reference implementation: " + ", ".join(
        f"{m.__name__}.py:{name}" for m, name in FUNCTIONS) + ".\n"
    return notice() + origin + HEADER + "".join(f"\n\n{inspect.getsource(getattr(m, name))}" for m, name in FUNCTIONS)


def noise_text():
    """The noise's file: the notice, then noise.py as it is here."""
    return notice() + "# From the CMD reference implementation: noise.py, whole.\n" + inspect.getsource(noise)


@one_line("tools.cmdloss")
def main(argv=None):
    p = Parser(prog="python -m tools.cmdloss", command="python -m tools.cmdloss", description=__doc__.split("\n")[0])
    p.add_argument("out", help="the file to write, in your own project, e.g. ~/myproject/cmdloss.py (it must not "
                               "exist yet)")
    p.add_argument("--noise", metavar="FILE", help="also write noise.py whole (add_noise, transition_matrix and the "
                                                   "NOISE registry they read; numpy only) into FILE, e.g. "
                                                   "~/myproject/cmdnoise.py (it must not exist yet)")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    files = {args.out: (text, ", ".join(name for _, name in FUNCTIONS))}
    if args.noise:
        if os.path.abspath(args.noise) == os.path.abspath(args.out):
            raise UserError(f"--noise {args.noise} is the loss's file too; give the noise a file of its own")
        files[args.noise] = (noise_text, "noise.py whole: add_noise, transition_matrix, NOISE")
    for out in files:  # every file checked before the first is written
        if os.path.exists(out):
            raise UserError(f"{out} exists; give a new file name, or delete it first")
        folder = os.path.dirname(os.path.abspath(out))
        if not os.path.isdir(folder):
            raise UserError(f"{out}: its folder {folder} does not exist")
    for out, (source, what) in files.items():
        runfiles.write_text(out, source())
        print(f"{out}: the MIT notice and {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
