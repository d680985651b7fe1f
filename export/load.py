"""aotgrad.load_exported: a saved package (ExportedProgram.save) as a callable."""
import importlib.util
import os
import sys
import uuid


class LoadedProgram:
    """Runs the package's own run.py: `f(*inputs)` with numpy arrays or tensors, numpy out."""

    def __init__(self, directory, module):
        self.directory, self._module = directory, module
        self.manifest = module.manifest()

    def __call__(self, *inputs):
        arrays = [x.detach().numpy() if hasattr(x, "detach") else x for x in inputs]
        return self._module.run(*arrays)

    def warm(self):
        """Compile every kernel now (run.warm): numba caches them beside the files."""
        self._module.warm()

    def __repr__(self):
        return f"LoadedProgram({self.manifest['name']!r} from {self.directory!r})"


def load_exported(directory):
    path = os.path.join(os.path.abspath(directory), "run.py")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"aotgrad.load_exported: {directory!r} holds no run.py: not a "
                                f"package written by ExportedProgram.save")
    name = f"_aotgrad_exported_run_{uuid.uuid4().hex}"   # one module per loaded package
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return LoadedProgram(directory, mod)
