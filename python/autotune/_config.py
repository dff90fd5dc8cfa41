"""Which tuning database and which policy the package's runtimes are created with.

    autotune.set_database("/path/tuning.db")   # else $AUTOTUNE_DB, else the default path
    autotune.set_policy("default")             # else $AUTOTUNE_POLICY, else "nearest"

A change applies to the calls after it: the runtimes created before it are retired, not
destroyed, so kernels they loaded stay loaded (a CUDA graph captured earlier keeps
replaying) and a call already running on another thread finishes on its runtime.
"""
import os
import threading

# The policy names autotune_runtime_create_with_policy knows (runtime/dispatch/c_api.cpp).
# "tune" tunes a new shape with the autotune CLI on its first call (the library finds the
# CLI next to itself or through $AUTOTUNE_CLI, and refuses the policy when it cannot).
POLICIES = ("nearest", "heuristic", "default", "error", "tune")
PIN_PREFIX = "pin:"

_lock = threading.Lock()
_database = None  # None: the library's default ($AUTOTUNE_DB, then the XDG cache path)
_database_set = False
_policy = None
_listeners = []


def check_policy(policy, where="policy"):
    pinned = isinstance(policy, str) and policy.startswith(PIN_PREFIX) and \
        len(policy) > len(PIN_PREFIX)
    if not isinstance(policy, str) or not (policy in POLICIES or pinned):
        raise ValueError(f"autotune: {where} {policy!r} is not one of " +
                         ", ".join(repr(p) for p in POLICIES) + " or 'pin:CONFIG' (e.g. "
                         "'pin:threads=128,vec=8,items=2,cpb=1,load=direct')")
    return policy


def set_database(path):
    """The tuning database the next runtimes open (read-only); None: back to the default
    ($AUTOTUNE_DB, else $XDG_CACHE_HOME/autotune/tuning.db, else ~/.cache/...). A missing
    file is not an error: every shape is then untuned and the policy decides."""
    global _database, _database_set
    if path is not None:
        path = os.fspath(path)
    with _lock:
        _database, _database_set = path, path is not None
    _changed()


def set_policy(policy):
    """What runs for a shape with no tuned winner: "nearest" (the configuration of the
    nearest tuned problem; the default), "heuristic" (a choice per GPU family),
    "default" (the op's default variant), "error" (refuse untuned shapes) or "pin:CONFIG"
    (that configuration). None: back to $AUTOTUNE_POLICY, else "nearest"."""
    global _policy
    if policy is not None:
        check_policy(policy)
    with _lock:
        _policy = policy
    _changed()


def database():
    """The path given to set_database, else None (the library then reads $AUTOTUNE_DB)."""
    return _database if _database_set else None


def policy():
    if _policy is not None:
        return _policy
    env = os.environ.get("AUTOTUNE_POLICY")
    if env:
        return check_policy(env, "$AUTOTUNE_POLICY")
    return "nearest"


def on_change(fn):
    _listeners.append(fn)


def _changed():
    for fn in _listeners:
        fn()
