"""aotgrad's version, in one place: pyproject.toml reads it (setuptools' dynamic version),
`aotgrad.__version__` re-exports it and the compile cache keys its entries on it."""
__version__ = "0.1.0"
