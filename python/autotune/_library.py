"""Finding libautotune.so. Import never fails for a missing library: the first call that
needs it raises LibraryNotFoundError naming every place that was tried, in order:

1. $AUTOTUNE_LIBRARY (a path to the library; nothing else is tried when it is set),
2. beside the package (a copy shipped in a wheel or an installed package),
3. the repository's build/ (the package used from a checkout: python/autotune/ next to
   build/libautotune.so),
4. the dynamic loader's search path (LD_LIBRARY_PATH, the ldconfig cache, an rpath):
   an installed libautotune.so.0 (`cmake --install`).
"""
import ctypes
import os

_NAMES = ("libautotune.so", "libautotune.so.0")
_HERE = os.path.dirname(os.path.abspath(__file__))


class LibraryNotFoundError(OSError):
    """libautotune.so could not be loaded from any of the places searched."""


def candidates():
    """The (description, path-or-name) pairs tried in order."""
    env = os.environ.get("AUTOTUNE_LIBRARY")
    if env:
        return [("$AUTOTUNE_LIBRARY", env)]
    found = [("beside the package", os.path.join(_HERE, n)) for n in _NAMES]
    repo_build = os.path.normpath(os.path.join(_HERE, "..", "..", "build"))
    found += [("the repository's build/", os.path.join(repo_build, n)) for n in _NAMES]
    found += [("the dynamic loader's search path", n) for n in reversed(_NAMES)]
    return found


def find():
    """The path (or loader name) of the first libautotune.so that loads."""
    tried = []
    for where, path in candidates():
        is_name = os.sep not in path
        if not is_name and not os.path.exists(path):
            tried.append(f"{path} ({where}: no such file)")
            continue
        try:
            ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path} ({where}: {e})")
            continue
        return path
    raise LibraryNotFoundError(
        "autotune: cannot load libautotune.so; tried:\n  " + "\n  ".join(tried) +
        "\nBuild it (./scripts/build.sh), set AUTOTUNE_LIBRARY=/path/to/libautotune.so, "
        "or put its folder on LD_LIBRARY_PATH")
