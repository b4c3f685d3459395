"""The methods CMD is compared with, one file each: its functions, its objective and its registry entries (MODES, each a
registry.Mode), which lab/__init__.py registers in the reference's mutual.MODES. A new method is a new file here."""
