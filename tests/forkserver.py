"""``python -X faulthandler -m MODULE ...`` and ``-c CODE`` for the tests, without paying for ``import torch`` each time.

A test that runs an example as a reader does (``Cli.run`` in ``tests/conftest.py``) started a fresh
interpreter, and almost every one then imported torch: about 2.5 s of CPU each, a few minutes of a
2-core CI in all. Here one server per pytest process imports torch once, with the environment of
those runs (``Cli.cpu_env()``), and forks a child per command. The child is a process of its own,
as before: it sets up what a fresh ``python -X faulthandler -m MODULE`` would have (the
environment, the working directory, ``sys.argv``, ``sys.path[0]``, a new ``__main__``, stdin from
``/dev/null``, stdout and stderr to files; the RNGs that fork would share, reseeded) and runs the
module through ``runpy`` as ``-m`` does; its exit status, its output and its interpreter's shutdown
are its own. Only the third-party modules of ``PRELOAD`` (and what they import) are already
imported; the examples' modules are imported by the child. A command that would not import torch
(read from its source and the examples' modules it imports) runs in a fresh interpreter: that is
quicker than a child whose exit tears down the torch it never used.

A command whose environment differs from the server's in anything but ``ENV_FREE`` (say a
``PYTHONPATH``, which changes what is imported) runs in a fresh interpreter, as does every command
where the server cannot start, and all of them with ``LAB_TESTS_FORKSERVER=0``. The variables of
``ENV_FREE`` are those that importing ``PRELOAD`` does not read: the server records every variable
that its imports read through ``os.environ``, and one of them that differs still means a fresh
interpreter.

Run as a script, this file is the server: requests and answers are JSON lines on two pipes
(the file descriptors in ``argv``).
"""
from __future__ import annotations

import ast
import functools
import json
import os
import sys
from pathlib import Path

#: What the server imports before it forks: torch, and what most commands import next (pydantic:
#: the records). Not Dynamo: it imports Triton, which fixes at import whether it interprets
#: (TRITON_INTERPRET), and an example may set that itself before it imports Triton.
PRELOAD = ("torch", "numpy", "pydantic.main", "tqdm")
#: Variables a command may set differently from the server's environment: those of the compilers,
#: the communication libraries and the tests, none of which PRELOAD imports (Triton reads
#: TRITON_INTERPRET when it is imported, by the child). They matter because the suite's own process
#: sets some as it imports or runs an example in-process (Inductor's TORCHINDUCTOR_CACHE_DIR,
#: ring_allreduce's NCCL_NVLS_ENABLE, triton_ptx's TRITON_DEFAULT_FP_FUSION, Material's
#: NO_MKDOCS_2_WARNING): each command after
#: that, on that worker, went to a fresh interpreter, most of the suite's commands.
ENV_FREE = ("TRITON_INTERPRET", "NO_MKDOCS_2_WARNING")  # Material's import sets the latter, in-process
ENV_FREE_PREFIXES = ("PYTEST_", "LAB_", "TRITON_", "TORCHINDUCTOR_", "NCCL_", "NVSHMEM_", "TORCH_SYMM_MEM_")
OFF = "LAB_TESTS_FORKSERVER"  # =0: every command in a fresh interpreter


# -- which commands import torch ---------------------------------------------------------------
def imports_torch(args: list[str], repo: Path) -> bool:
    """Whether ``python -m MODULE`` or ``-c CODE`` imports torch, read from the source: the code run
    (anywhere in it: its ``main`` runs) or a module of the repository that it imports (where that module
    is imported: at its top level, transitively; its packages' ``__init__`` too) names torch."""
    if args[0] == "-c":
        return _names_torch(ast.parse(args[1]), str(repo), everywhere=True)
    files = _module_files(args[1], str(repo))
    if files and files[-1].name == "__init__.py":  # -m PACKAGE runs PACKAGE.__main__
        files = (*files, files[-1].with_name("__main__.py"))
    *imported, run = [f for f in files if f.is_file()] or [None]
    if run is None:
        return False
    return (any(_file_imports_torch(str(f), str(repo)) for f in imported)
            or _names_torch(ast.parse(run.read_text(encoding="utf-8")), str(repo), everywhere=True))


@functools.cache
def _module_files(name: str, repo: str) -> tuple[Path, ...]:
    """The files that importing ``name`` runs from the repository: each package's __init__, then the module."""
    parts = name.split(".")
    files = []
    for i in range(1, len(parts) + 1):
        base = Path(repo, *parts[:i])
        if (base / "__init__.py").is_file():
            files.append(base / "__init__.py")
        elif base.with_suffix(".py").is_file() and i == len(parts):
            files.append(base.with_suffix(".py"))
        elif i == 1:
            return ()  # not a module of the repository
    return tuple(files)


_SEEN: set[str] = set()  # files being read, so that an import cycle ends


@functools.cache
def _file_imports_torch(path: str, repo: str) -> bool:
    if path in _SEEN:
        return False
    _SEEN.add(path)
    try:
        return _names_torch(ast.parse(Path(path).read_text(encoding="utf-8")), repo, everywhere=False)
    finally:
        _SEEN.discard(path)


def _top_level(tree: ast.AST):
    """The nodes that run when a module is imported: not those inside a function."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        todo.extend(child for child in ast.iter_child_nodes(node)
                    if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))


def _names_torch(tree: ast.AST, repo: str, everywhere: bool) -> bool:
    for node in ast.walk(tree) if everywhere else _top_level(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        for name in names:
            if name.split(".")[0] == "torch":
                return True
            if any(_file_imports_torch(str(f), repo) for f in _module_files(name, repo)):
                return True
    return False


# -- the client: in the pytest process ---------------------------------------------------------
class ForkServer:
    """One server process; ``run`` answers ``(returncode, stdout, stderr)``, or None where it cannot."""

    def __init__(self, env: dict[str, str], cwd: str, scratch: str):
        import subprocess
        import threading

        self.env, self.cwd, self.scratch = dict(env), cwd, scratch
        self.lock = threading.Lock()
        request_r, self._request_w = os.pipe()
        self._answer_r, answer_w = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-X", "faulthandler", __file__, str(request_r), str(answer_w)],
            cwd=cwd, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, pass_fds=(request_r, answer_w),
        )
        os.close(request_r)
        os.close(answer_w)
        self._pending = b""  # read from the answer pipe, not yet a whole line
        ready = self._read(timeout=180) or {}
        self.alive = ready.get("ready") is True
        #: The variables the server's imports read (through os.environ): never free to differ.
        self.read = frozenset(ready.get("read", ()))

    def _read(self, timeout: float):
        """The next answer; None if none comes within ``timeout`` s or the server is gone."""
        import select
        import time

        deadline = time.monotonic() + timeout
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._answer_r], [], [], left)[0]:
                return None
            chunk = os.read(self._answer_r, 65536)
            if not chunk:
                return None
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return json.loads(line)

    def usable_for(self, env: dict[str, str]) -> bool:
        if not self.alive or self.proc.poll() is not None:
            return False
        differ = {k for k in env.keys() | self.env.keys() if env.get(k) != self.env.get(k)}
        return all((k in ENV_FREE or k.startswith(ENV_FREE_PREFIXES)) and k not in self.read for k in differ)

    def run(self, args: list[str], env: dict[str, str], timeout: float):
        """``python -X faulthandler ARGS`` in a forked child: (returncode, stdout, stderr, timed_out)."""
        import locale
        import signal
        import tempfile

        if not args or args[0] not in ("-m", "-c") or len(args) < 2 or not self.usable_for(env):
            return None
        if not imports_torch(args, Path(self.cwd)):
            return None
        with self.lock, tempfile.TemporaryDirectory(dir=self.scratch) as folder:
            out, err = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
            request = {"args": args, "env": env, "cwd": self.cwd, "stdout": out, "stderr": err}
            try:
                os.write(self._request_w, (json.dumps(request) + "\n").encode())
                started = self._read(timeout=60)
            except OSError:
                started = None
            if not started or "pid" not in started:
                self.alive = False
                return None
            answer = self._read(timeout=timeout)
            timed_out = answer is None
            if timed_out:  # as subprocess.run's timeout: killed; here with what it started
                try:
                    os.killpg(started["pid"], signal.SIGKILL)
                except ProcessLookupError:
                    pass
                answer = self._read(timeout=60)
                if answer is None:
                    self.alive = False
                    answer = {"returncode": -signal.SIGKILL}
            encoding = locale.getpreferredencoding(False)  # what subprocess.run(text=True) decodes with

            def text(path: str) -> str:
                with open(path, encoding=encoding, errors="strict") as f:  # universal newlines, as text=True
                    return f.read()

            return answer["returncode"], text(out), text(err), timed_out

    def close(self) -> None:
        for fd in (self._request_w, self._answer_r):  # the server reads end-of-file and exits
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            self.proc.wait(timeout=10)
        except Exception:  # noqa: BLE001 - a server that will not go is killed
            self.proc.kill()


# -- the server: run as a script ---------------------------------------------------------------
def _serve(request_fd: int, answer_fd: int) -> dict:
    """Answers requests until the client closes its pipe; returns only in a forked child, with its request."""
    import importlib

    read, scans = set(), []

    # os.environ, noting each variable read by name while PRELOAD is imported. A scan of them all
    # (items(), values(), a loop) is not noted: tqdm's, the only one, looks for its own TQDM_
    # variables, and noting it would take in every variable there is, PYTEST_CURRENT_TEST too.
    class Recorded(type(os.environ)):
        def __getitem__(self, key):
            if not scans:
                read.add(key)
            return super().__getitem__(key)

        def __contains__(self, key):
            if not scans:
                read.add(key)
            return super().__contains__(key)

        def __iter__(self):
            scans.append(True)
            try:
                yield from super().__iter__()
            finally:
                scans.pop()

    kind, os.environ.__class__ = os.environ.__class__, Recorded
    try:
        for name in PRELOAD:  # what the commands would import first
            importlib.import_module(name)
    finally:
        os.environ.__class__ = kind

    requests = os.fdopen(request_fd, "r", encoding="utf-8")
    answers = os.fdopen(answer_fd, "w", encoding="utf-8")

    def answer(message: dict) -> None:
        answers.write(json.dumps(message) + "\n")
        answers.flush()

    answer({"ready": True, "read": sorted(read)})
    for line in requests:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            requests.close()
            answers.close()
            return request
        answer({"pid": pid})
        _, status = os.waitpid(pid, 0)
        answer({"returncode": os.waitstatus_to_exitcode(status)})
    sys.exit(0)


def _become(request: dict) -> None:
    """In the child: the process ``python -X faulthandler ARGS`` would be, then run ARGS."""
    import runpy
    import types

    os.setsid()  # a group of its own: a timeout kills it and what it started
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY),
                            (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                            (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
        opened = os.open(path, flags, 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    if "numpy" in sys.modules:  # a fresh process seeds numpy's global RNG anew; a fork would share it
        sys.modules["numpy"].random.seed()
    option, target, *rest = request["args"]
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    if option == "-m":
        sys.argv = ["-m", *rest]  # runpy puts the module's file in sys.argv[0], as -m does
        sys.path[0] = os.getcwd()
        runpy._run_module_as_main(target, alter_argv=True)
    else:
        sys.argv = ["-c", *rest]
        sys.path[0] = ""
        exec(compile(target, "<string>", "exec"), main.__dict__)


if __name__ == "__main__":
    _server = sys.modules["__main__"]  # kept: the child replaces __main__
    _become(_serve(int(sys.argv[1]), int(sys.argv[2])))
    # The child ends here, as the command's interpreter would: atexit, threads, its exit status.
