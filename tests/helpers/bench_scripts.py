"""Loading the scripts of benchmarks/ as modules (they are not a package)."""


def load_script(name, path):
    """A script of benchmarks/ as a module under `name` (registered in sys.modules,
    where dataclasses look their module up); its module level must import only the
    standard library."""
    import importlib.util
    import sys
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod
