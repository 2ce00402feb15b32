# SPDX-License-Identifier: GPL-3.0-or-later
# A bytecode cache for the modules Ansible runs on a TEST host (installed by scripts/test-images.sh into the test
# host images only; never part of the collection, never on the demo host or a real one).
#
# Why: every module run on a host unpacks its AnsiballZ payload into a fresh temp zip and imports
# ansible.module_utils.basic and the collection's module_utils from it. zipimport compiles every .py it imports
# from source each time (it has no __pycache__): measured here, 0.33 s of CPU per run to import basic from the
# zip, 0.15 s with the bytecode cached. The molecule suite runs several thousand modules on two cores, so the
# compile is a large share of its time (docs/development.md, "The levers").
#
# What: zipimport's one compile step, `_compile_source(pathname, source)`, is wrapped for payload zips only: the
# code object is kept under the sha256 of the source (and the interpreter's cache tag), as CPython keeps a
# .pyc for a file on disk; the file name in the code object is set to this run's path, as CPython's own loader
# does for a .pyc. The module's code, interpreter and behaviour are the same; any error in the cache means the
# plain compile. Loaded from a .pth line, so only the system interpreter (/usr/bin/python3) has it: the SGLang
# venvs and the stand-in do not.
"""Bytecode cache for AnsiballZ payload imports on test hosts (a test fixture)."""

import _imp
import marshal
import os
import sys
import zipimport

CACHE_DIR = os.path.join(
    os.environ.get('GPUSERVE_TEST_PYC_DIR', '/var/cache/gpuserve-test-pyc'), sys.implementation.cache_tag or 'none')
_PAYLOAD_MARK = '_payload.zip'
_plain_compile = zipimport._compile_source  # pylint: disable=protected-access


def _cache_path(source):
    # imported only when a payload is, not at every start of the interpreter
    import hashlib  # pylint: disable=import-outside-toplevel
    return os.path.join(CACHE_DIR, hashlib.sha256(source).hexdigest())


def compile_source(pathname, source):
    """zipimport's _compile_source, with the code object cached by the sha256 of the source for payload zips."""
    if _PAYLOAD_MARK not in pathname or not isinstance(source, bytes):
        return _plain_compile(pathname, source)
    try:
        path = _cache_path(source)
    except Exception:  # pylint: disable=broad-except
        return _plain_compile(pathname, source)
    try:
        with open(path, 'rb') as cached:
            code = marshal.loads(cached.read())
        _imp._fix_co_filename(code, pathname)  # pylint: disable=protected-access
        return code
    except (OSError, ValueError, EOFError, TypeError):
        pass
    code = _plain_compile(pathname, source)
    tmp = '%s.%d.tmp' % (path, os.getpid())
    try:
        os.makedirs(CACHE_DIR, mode=0o700, exist_ok=True)
        with open(tmp, 'wb') as out:
            out.write(marshal.dumps(code))
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    return code


def install():
    """Wrap zipimport's compile step (once)."""
    if getattr(zipimport, '_compile_source', None) is _plain_compile:
        zipimport._compile_source = compile_source  # pylint: disable=protected-access


install()
