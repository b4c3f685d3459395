"""The README's "Copy the loss" file, written from this repository's own source with its licence notice:

    python -m tools.cmdloss ~/myproject/cmdloss.py    # from this repository's root; then `from cmdloss import ...`

FUNCTIONS -- the six functions the README's loop uses, in the order they are written
text      -- the file: the MIT notice (LICENSE, as comments), three imports, each function's source as it is here

What the README's block runs beside (tests/test_copy.py runs it against exactly this file). The functions call
nothing else of this repository.
"""
import inspect
import os
import sys

import label_correction
import losses
import schedule
from training.errors import Parser, UserError, one_line

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FUNCTIONS = [(schedule, "logistic"), (schedule, "chi"), (losses, "entropy"), (losses, "cmd_loss"),
             (label_correction, "mylc"), (label_correction, "confidence_from_sum")]
HEADER = "import math\n\nimport torch\nimport torch.nn.functional as F\n"  # all the functions need


def text():
    """The whole file: the notice, the imports, the functions."""
    with open(os.path.join(HERE, "LICENSE")) as f:
        notice = "".join(f"# {line}".rstrip() + "\n" for line in f)
    origin = "# From the CMD reference implementation: " + ", ".join(
        f"{m.__name__}.py:{name}" for m, name in FUNCTIONS) + ".\n"
    return notice + origin + HEADER + "".join(f"\n\n{inspect.getsource(getattr(m, name))}" for m, name in FUNCTIONS)


@one_line("tools.cmdloss")
def main(argv=None):
    p = Parser(prog="python -m tools.cmdloss", command="python -m tools.cmdloss", description=__doc__.split("\n")[0])
    p.add_argument("out", help="the file to write, in your own project, e.g. ~/myproject/cmdloss.py (it must not "
                               "exist yet)")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    if os.path.exists(args.out):
        raise UserError(f"{args.out} exists; give a new file name, or delete it first")
    folder = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(folder):
        raise UserError(f"{args.out}: its folder {folder} does not exist")
    with open(args.out, "w") as f:
        f.write(text())
    print(f"{args.out}: the MIT notice and {', '.join(name for _, name in FUNCTIONS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
