"""What every figure of tools/plot.py, tools/plot_sweep.py and tools/demo_tables.py shares: matplotlib on Agg,
the size, the paper's names of the modes, label corrections and noise, numbers as legends write them, saving.
"""
import math
import sys

FIGSIZE, DPI = (6, 4), 120  # readable at README width

MINUS = "\u2212"  # a real minus sign, not a hyphen
MODE_NAMES = {"zero": "Zero knowledge", "all": "All knowledge", "static": "CMD-S", "progressive": "CMD-P",
              "mkd": "MKD (Eq. 2)", "kdcl": "KDCL", "coteach": "Co-teaching", "coteach+": "Co-teaching+",
              "jocor": "JoCoR"}  # the paper's names of the knowledge modes, and of the comparators (baselines.py)
LC_NAMES = {"ce": "CE", "ls": "LS", "cp": "CP", "bootsoft": "Boot-soft", "proselflc": "ProSelfLC", "mylc": "MyLC",
            "tfkd": "Tf-KD_reg", "gce": "GCE"}  # and of the label corrections
NOISE_NAMES = {"sym": "symmetric", "pair": "pair-flip"}


def pyplot():
    """matplotlib.pyplot on Agg, or a one-line error and exit 1 when it is not installed."""
    try:
        import matplotlib  # here, so that a missing matplotlib is one line, not a traceback
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # after use("Agg"): no display needed
    except ImportError:
        sys.exit("plot.py: error: matplotlib is not installed; pip install matplotlib")
    return plt


def number(v):
    """A setting as the legend writes it: 4.0 as 4, -5 as −5 (a real minus sign), inf (or "inf") as ∞."""
    v = float(v)
    if math.isinf(v):
        return ("" if v > 0 else MINUS) + "∞"
    return f"{v:g}".replace("-", MINUS)


def save(plt, fig, path):
    if fig.get_layout_engine() is None:  # a figure made with layout="constrained" lays itself out
        fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    print(f"wrote {path}")
    return path
