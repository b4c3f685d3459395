"""Unpickling numpy data without running code: the CIFAR-N label files (cifar_n.py).

pickle.load calls whatever a file names, so a tampered file runs code on load. CIFAR's own pickles are safe to
load because torchvision checks each against its published md5 first; CIFAR-N's files have no published md5,
so they are read through this Unpickler. They hold only dicts, lists, strings and numpy arrays, and an array
needs only numpy's reconstruction functions. Unpickler resolves exactly those (under numpy 1's module names and
numpy 2's, for pickle protocols 2 to 5) and refuses any other name before anything is called.
torch.load(weights_only=True) is no help here: it refuses numpy arrays unless told of their globals, and how
it is told differs between the torch versions requirements.txt allows.

load     -- one pickled object from a binary file, through Unpickler
Refused  -- raised for a file that names anything else; nothing it names was run
"""
import pickle

import numpy as np

_RECONSTRUCT = np.ndarray((0,)).__reduce__()[0]  # numpy's _reconstruct (protocols 2-4)
_FROMBUFFER = np.zeros(1).__reduce_ex__(5)[0]  # numpy's _frombuffer (protocol 5)


class Refused(pickle.UnpicklingError):
    """The file names something that plain numpy data never needs; nothing it names was run."""


def _latin1(text, encoding):  # protocol 2 spells bytes as _codecs.encode(str, "latin1")
    if encoding != "latin1":
        raise Refused(f"it needs _codecs.encode with encoding {encoding!r}")
    return text.encode("latin1")


SAFE_GLOBALS = {(f"numpy{core}.{module}", name): fn for core in ("._core", ".core")
                for module, name, fn in (("multiarray", "_reconstruct", _RECONSTRUCT),
                                         ("numeric", "_frombuffer", _FROMBUFFER))}
SAFE_GLOBALS.update({("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype, ("_codecs", "encode"): _latin1})


class Unpickler(pickle.Unpickler):
    """pickle.Unpickler that resolves only SAFE_GLOBALS, so a file cannot name a function to call."""

    def find_class(self, module, name):
        if (module, name) not in SAFE_GLOBALS:
            raise Refused(f"it needs {module}.{name}, which plain numpy data never does")
        return SAFE_GLOBALS[module, name]

    def persistent_load(self, pid):
        raise Refused("it holds torch tensors, which plain numpy data never does")


def load(f):
    """One object from the binary file f; latin1 decodes Python 2's strings, as numpy and torchvision do."""
    return Unpickler(f, encoding="latin1").load()
