"""The lab: the methods CMD is compared with, and what compares them (tools/, studies/), beside the reference (the root
and training/), which it imports and which never imports it.

methods/  -- one file a method, each its functions, its objective and its registry entries (MODES)
stages.py -- what a method learns between epochs, through the protocol train.py exposes (registry.Mode.between)
alone.py  -- the form the single-network methods share: each network trained alone by its own loss
train.py  -- python lab/train.py: train.py with the methods registered, the reference's flags plus theirs
confident.py -- python lab/confident.py: confident learning (cleanlab) on out-of-fold probabilities, then CE on the rest

METHODS   -- every method's registry entries, gathered from methods/
register  -- add them to the reference's registry of modes (mutual.register), once
"""
import importlib
import pkgutil

import mutual
from lab import methods

METHODS = {}
for _info in sorted(pkgutil.iter_modules(methods.__path__), key=lambda i: i.name):
    METHODS.update(importlib.import_module(f"lab.methods.{_info.name}").MODES)


def register():
    """Add every method of methods/ to mutual.MODES (and their settings to train.py's flags); a second call does
    nothing."""
    if not set(METHODS) <= set(mutual.MODES):
        mutual.register(METHODS)
