"""Where the test files find the repository: its root (the package folder `aotgrad`) and the
folder that holds it (what a subprocess puts on sys.path to import this checkout)."""
import os

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_PARENT = os.path.dirname(REPO_ROOT)
