"""Train any row of the comparison: train.py with the lab's methods registered (lab/methods/), the reference's flags
plus theirs.

    python lab/train.py --mode coteach --dataset cifar100 --noise sym --rate 0.4
    python lab/train.py --mode dmi --warmup 80 --dataset cifar100 --noise sym --rate 0.4
    python lab/train.py --help          # train.py's flags, and every method's

Everything train.py does it does (its files, resume, signals, torchrun), with train.py's modes and corrections too.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if __name__ == "__main__":
    sys.path[0] = ROOT  # the reference beside the lab (python lab/train.py puts lab/ itself there)
    from training.errors import stop_early
    stop_early("lab/train.py")

import lab  # noqa: E402
import train  # noqa: E402


def main(argv=None):
    """train.main with every method of the lab registered. Returns summary.json's numbers."""
    lab.register()
    return train.main(argv)


if __name__ == "__main__":
    import signal
    import warnings

    from training.errors import stop_on_sigterm
    warnings.formatwarning = lambda message, *_, **__: f"lab/train.py: warning: {message}\n"
    signal.signal(signal.SIGINT, signal.default_int_handler)
    stop_on_sigterm()
    main()
