"""`python -m aotgrad`: the version, the compile cache, and `explain` from the shell.

    python -m aotgrad version            aotgrad's version (and numpy's, numba's, Python's)
    python -m aotgrad cache              where the compile cache is, and its size
    python -m aotgrad cache clear        delete the cached modules and their machine code
    python -m aotgrad explain FILE:FN    aotgrad.explain(FN, *inputs) for FN in FILE

`explain` imports FILE as a module (running its top level, as `python FILE` would, except
under a `__main__` guard) and takes the example inputs from the file's `example_inputs()`
or from the function's `__aotgrad_example__` attribute (a tuple of arguments, or a callable
that returns one).
"""
import argparse
import importlib.util
import os
import platform
import sys


def _version(args):
    import numba
    import numpy
    from aotgrad import __version__
    print(f"aotgrad {__version__} (numpy {numpy.__version__}, numba {numba.__version__}, "
          f"Python {platform.python_version()})")
    return 0


def _size(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def _cache(args):
    from aotgrad import codegen
    if args.action == "clear":
        freed = codegen.cache_clear()
        print(f"cleared {codegen.cache_dir()}: {_size(freed)} freed")
        return 0
    info = codegen.cache_info()
    print(f"{info['dir']}: {info['modules']} modules, {info['files']} files, "
          f"{_size(info['bytes'])}")
    return 0


def _load_function(spec):
    path, sep, name = spec.rpartition(":")
    if not sep or not path or not name:
        raise SystemExit(f"explain: expected FILE:FN (e.g. model.py:loss), got {spec!r}")
    if not os.path.isfile(path):
        raise SystemExit(f"explain: no such file: {path}")
    mod_name = "aotgrad_explain_" + os.path.splitext(os.path.basename(path))[0]
    loader_spec = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[mod_name] = module      # dataclasses and pickling look the module up
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))  # its sibling imports
    loader_spec.loader.exec_module(module)
    fn = getattr(module, name, None)
    if fn is None or not callable(fn):
        raise SystemExit(f"explain: {path} defines no function {name!r}")
    return module, fn


def _example_inputs(module, fn, spec):
    if hasattr(module, "example_inputs"):
        inputs = module.example_inputs()
    elif hasattr(fn, "__aotgrad_example__"):
        inputs = fn.__aotgrad_example__
        inputs = inputs() if callable(inputs) else inputs
    else:
        raise SystemExit(
            f"explain: no example inputs for {spec}: define `example_inputs()` in the file "
            f"(returning a tuple of arguments) or set `{fn.__name__}.__aotgrad_example__`")
    return inputs if isinstance(inputs, tuple) else (inputs,)


def _explain(args):
    import aotgrad
    module, fn = _load_function(args.target)
    print(aotgrad.explain(fn, *_example_inputs(module, fn, args.target)))
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m aotgrad", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("version", help="print the versions").set_defaults(run=_version)
    cache = sub.add_parser("cache", help="show the compile cache's location and size, or "
                                         "clear it")
    cache.add_argument("action", nargs="?", choices=["clear"],
                       help="`clear`: delete the cached modules")
    cache.set_defaults(run=_cache)
    explain = sub.add_parser("explain", help="graphs, graph breaks and guards of FN for its "
                                             "example inputs")
    explain.add_argument("target", metavar="FILE:FN")
    explain.set_defaults(run=_explain)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
