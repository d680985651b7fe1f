"""Where the test files find the repository: its root (the package folder `aotgrad`), for
the examples and benchmarks folders beside the package's modules."""
import os

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
