"""A test's script run in a fresh Python process on a given kernel cache (a second run of a
program, after the first left its work to the detached compile helper)."""
import json
import os
import subprocess
import sys

from repo_paths import REPO_ROOT


def run_child(script, case_file, cache_dir):
    """Run `script` (Python source; its argv[1] is `case_file`, the test module it loads its
    case from) with `cache_dir` as the kernel cache and background compiles on, no other
    AOTGRAD_ setting inherited; returns the JSON object its last line prints."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AOTGRAD_")}
    env.update(AOTGRAD_CACHE_DIR=str(cache_dir), AOTGRAD_BACKGROUND_COMPILE="1",
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    r = subprocess.run([sys.executable, "-c", script, os.path.abspath(case_file)], env=env,
                       capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])
