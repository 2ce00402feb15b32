# SPDX-License-Identifier: GPL-3.0-or-later
# Compile caches for the TEST controller (the development venv that `make test` runs ansible-playbook, molecule and
# pytest from; installed by scripts/venv.sh as a .pth line, active only while GPUSERVE_TEST_CTL_CACHE names a
# directory, which scripts/test.sh and scripts/molecule-all.sh set to a fresh directory per run). Never part of the
# collection, never used by `make demo` or an operator's controller.
#
# Why: Ansible forks a worker per task and host, and the worker compiles what it needs from scratch and throws it
# away when it exits: the Jinja templates of the task's arguments and conditions, the collection's plugin code
# (the collection loader compiles from source and keeps no .pyc), and the AnsiballZ payload of each module (kept
# per ansible-playbook process only). `make test` runs about 400 ansible-playbook processes and 17,000 workers on
# two cores (docs/development.md, "where the CPU goes"). Measured: a no-op run of the server role costs the
# controller 3.8-4.1 s of CPU without these caches, 3.0-3.3 s with them (docs/performance.md, section 12).
#
# What, each keyed by everything its result depends on, so a changed input is a new key and can never be served
# stale:
#   - jinja2 Environment.compile (template source -> code object): the source, the Jinja version, the interpreter,
#     the environment's class and every setting the lexer, parser and code generator read;
#   - the collection loader's get_code (plugin source -> code object): the source and its file name;
#   - ansible's recursive_finder (module -> the module_utils files it adds to the payload): the module's source,
#     its name, ansible's version and the sha256 of every module_utils and plugin_utils file of this collection
#     on the collection path (read once per process); the files are written into the payload again on a hit.
# Any error in the cache, or an Ansible or Jinja whose functions do not look as expected, means no cache.
"""Compile caches for the test controller (a test fixture of make test; never the product's)."""

import hashlib
import importlib.abc
import inspect
import marshal
import os
import pickle
import sys

ENV = 'GPUSERVE_TEST_CTL_CACHE'
TAG = sys.implementation.cache_tag or 'none'
COLLECTION = ('gpuserve', 'sglang')


def cache_dir():
    """The cache directory of this run, or None (no cache)."""
    value = os.environ.get(ENV, '')
    return value if os.path.isabs(value) else None


def _entry(kind, key):
    return os.path.join(cache_dir() or '/nonexistent', kind, key[:2], key)


def _read(kind, key):
    try:
        with open(_entry(kind, key), 'rb') as cached:
            return cached.read()
    except OSError:
        return None


def _write(kind, key, data):
    path = _entry(kind, key)
    tmp = '%s.%d.tmp' % (path, os.getpid())
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        with open(tmp, 'wb') as out:
            out.write(data)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _key(*parts):
    digest = hashlib.sha256()
    for part in parts:
        data = part if isinstance(part, bytes) else repr(part).encode('utf-8', 'surrogatepass')
        digest.update(len(data).to_bytes(8, 'big'))
        digest.update(data)
    return digest.hexdigest()


def _load_code(kind, key):
    data = _read(kind, key)
    if data is None:
        return None
    try:
        return marshal.loads(data)
    except (ValueError, EOFError, TypeError):
        return None


def jinja_signature(env):
    """Everything of a Jinja environment that the lexer, parser and code generator read."""
    import jinja2  # pylint: disable=import-outside-toplevel
    autoescape = env.autoescape if isinstance(env.autoescape, bool) else 'callable:%r' % (env.autoescape,)
    generator = getattr(env, 'code_generator_class', None)
    return (jinja2.__version__, TAG, type(env).__module__, type(env).__qualname__,
            '%s.%s' % (generator.__module__, generator.__qualname__) if generator else '',
            env.block_start_string, env.block_end_string, env.variable_start_string, env.variable_end_string,
            env.comment_start_string, env.comment_end_string, env.line_statement_prefix, env.line_comment_prefix,
            env.trim_blocks, env.lstrip_blocks, env.newline_sequence, env.keep_trailing_newline,
            sorted(env.extensions), env.optimized, env.is_async, getattr(env, 'sandboxed', False),
            env.finalize is not None, autoescape,
            bool(getattr(env, 'intercepted_binops', ())), bool(getattr(env, 'intercepted_unops', ())))


def patch_jinja(module):
    """Cache Environment.compile of a template source (not raw, not an AST)."""
    environment = module.Environment
    plain = environment.compile
    if list(inspect.signature(plain).parameters) != ['self', 'source', 'name', 'filename', 'raw', 'defer_init']:
        return

    def compile_cached(self, source, name=None, filename=None, raw=False, defer_init=False):
        if raw or not isinstance(source, str) or cache_dir() is None:
            return plain(self, source, name, filename, raw, defer_init)
        try:
            key = _key('jinja', jinja_signature(self), name, filename, defer_init, source)
        except Exception:  # pylint: disable=broad-except
            return plain(self, source, name, filename, raw, defer_init)
        code = _load_code('jinja', key)
        if code is None:
            code = plain(self, source, name, filename, raw, defer_init)
            _write('jinja', key, marshal.dumps(code))
        return code

    compile_cached.gpuserve_test_ctl = True
    environment.compile = compile_cached


def patch_collection_finder(module):
    """Cache the collection loader's compile of a plugin's source."""
    base = getattr(module, '_AnsibleCollectionPkgLoaderBase', None)
    if base is None or not hasattr(base, 'get_code'):
        return

    def get_code(self, fullname):
        if self._compiled_code:  # pylint: disable=protected-access
            return self._compiled_code  # pylint: disable=protected-access
        filename = self.get_filename(fullname) or '<string>'
        source = self.get_source(fullname)
        if source is None:
            return None
        cached = cache_dir() is not None
        data = source if isinstance(source, bytes) else source.encode('utf-8', 'surrogatepass')
        key = _key('pyc', TAG, filename, data)
        code = _load_code('pyc', key) if cached else None
        if code is None:
            code = compile(source=source, filename=filename, mode='exec', flags=0, dont_inherit=True)
            if cached:
                _write('pyc', key, marshal.dumps(code))
        self._compiled_code = code  # pylint: disable=protected-access
        return code

    get_code.gpuserve_test_ctl = True
    base.get_code = get_code


def collection_digest():
    """sha256 over every module_utils and plugin_utils source of this collection on the collection path."""
    from ansible.utils.collection_loader import AnsibleCollectionConfig  # pylint: disable=import-outside-toplevel
    digest = hashlib.sha256()
    for base in AnsibleCollectionConfig.collection_paths or []:
        for sub in ('module_utils', 'plugin_utils'):
            root = os.path.join(base, 'ansible_collections', COLLECTION[0], COLLECTION[1], 'plugins', sub)
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames[:] = sorted(d for d in dirnames if d != '__pycache__')
                for filename in sorted(f for f in filenames if f.endswith('.py')):
                    path = os.path.join(dirpath, filename)
                    with open(path, 'rb') as source:
                        digest.update(path.encode('utf-8', 'surrogateescape') + b'\0')
                        digest.update(hashlib.sha256(source.read()).digest())
    return digest.hexdigest()


class _Recorder:
    """A zip file that passes every call through and keeps what recursive_finder writes."""

    def __init__(self, zipfile):
        self._zipfile = zipfile
        self.written = []

    def __getattr__(self, name):
        return getattr(self._zipfile, name)

    def writestr(self, zinfo, data, *args, **kwargs):
        self.written.append((getattr(zinfo, 'filename', zinfo), data))
        return self._zipfile.writestr(zinfo, data, *args, **kwargs)


def patch_module_common(module):
    """Cache the module_utils that recursive_finder adds to a module's payload."""
    plain = getattr(module, 'recursive_finder', None)
    make_zinfo = getattr(module, '_make_zinfo', None)
    if plain is None or make_zinfo is None or list(inspect.signature(plain).parameters) != [
            'name', 'module_fqn', 'module_data', 'zf', 'date_time', 'extension_manager']:
        return
    state = {}

    def recursive_finder(name, module_fqn, module_data, zf, date_time, extension_manager):
        if cache_dir() is None:
            return plain(name, module_fqn, module_data, zf, date_time, extension_manager)
        try:
            if 'collection' not in state:
                state['collection'] = collection_digest()
            data = module_data if isinstance(module_data, bytes) else str(module_data).encode('utf-8', 'surrogatepass')
            key = _key('ansiballz', module.__version__, TAG, name, module_fqn, state['collection'],
                       list(getattr(extension_manager, 'extension_names', None) or []), data)
        except Exception:  # pylint: disable=broad-except
            return plain(name, module_fqn, module_data, zf, date_time, extension_manager)
        cached = _read('ansiballz', key)
        if cached is not None:
            try:
                written, metadata = pickle.loads(cached)
            except Exception:  # pylint: disable=broad-except
                written = None
            if written is not None:
                for filename, content in written:
                    zf.writestr(make_zinfo(filename, date_time, zf=zf), content)
                return metadata
        recorder = _Recorder(zf)
        metadata = plain(name, module_fqn, module_data, recorder, date_time, extension_manager)
        try:
            _write('ansiballz', key, pickle.dumps((recorder.written, metadata)))
        except Exception:  # pylint: disable=broad-except
            pass
        return metadata

    recursive_finder.gpuserve_test_ctl = True
    module.recursive_finder = recursive_finder


PATCHES = {
    'jinja2.environment': patch_jinja,
    'ansible.utils.collection_loader._collection_finder': patch_collection_finder,
    'ansible.executor.module_common': patch_module_common,
}


class _Finder(importlib.abc.MetaPathFinder):
    """Patches each module of PATCHES right after it is imported."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in PATCHES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, 'find_spec'):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        plain_exec = getattr(loader, 'exec_module', None)
        if plain_exec is None:
            return spec

        def exec_module(module):
            plain_exec(module)
            try:
                PATCHES[fullname](module)
            except Exception:  # pylint: disable=broad-except
                pass

        loader.exec_module = exec_module
        return spec


def install():
    """Install the import hook once, when GPUSERVE_TEST_CTL_CACHE names a directory."""
    if cache_dir() and not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


install()
