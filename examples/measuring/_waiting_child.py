"""A profiled child process that starts while its parent works, and waits for
the parent's word before it touches the GPU.

Starting a profiler (``ncu``, ``nsys``), then Python and torch inside it, takes
seconds of host time that have nothing to do with the GPU. The capture
examples start their child first and let it get that far while they check
their kernels; the child then waits, idle, until the parent has finished with
the GPU, so that the two never use it at once.

The word is a file whose path the child finds in ``LAB_GO_FILE``: ``go`` to
run, anything else to leave. The child says it is waiting by creating the
same path with ``.ready`` appended. Run by hand (no ``LAB_GO_FILE``), the
child does not wait.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GO_FILE = "LAB_GO_FILE"
#: The longest a child waits for its word before it gives up (seconds).
PATIENCE = 900


def wait_for_go(patience: float = PATIENCE) -> None:
    """In the child, after its imports: wait for the parent's ``go``; exit on any other word."""
    path = os.environ.get(GO_FILE)
    if not path:
        return
    Path(path + ".ready").touch()
    deadline = time.monotonic() + patience
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            sys.exit(f"no word from the parent in {patience:.0f} s")
        time.sleep(0.01)
    if Path(path).read_text().strip() != "go":
        sys.exit(0)


class WaitingChild:
    """In the parent: ``cmd`` started now, told to go by :meth:`go` (or to leave, on an error)."""

    def __init__(self, cmd: list[str]):
        self._folder = tempfile.TemporaryDirectory()
        self._word = os.path.join(self._folder.name, "word")
        env = {**os.environ, GO_FILE: self._word}
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)

    def __enter__(self) -> WaitingChild:
        return self

    def ready(self, timeout: float = PATIENCE) -> None:
        """Until the child waits (or has exited: :meth:`go` then reports how)."""
        deadline = time.monotonic() + timeout
        while not os.path.exists(self._word + ".ready") and self.proc.poll() is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the profiled child did not start within {timeout:.0f} s")
            time.sleep(0.01)

    def go(self, timeout: float) -> subprocess.CompletedProcess:
        """Tell the child to run; its exit status and output once it is done."""
        self._say("go")
        out, err = self.proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(self.proc.args, self.proc.returncode, out, err)

    def _say(self, word: str) -> None:
        if not os.path.exists(self._word):
            partial = self._word + ".partial"
            Path(partial).write_text(word)
            os.replace(partial, self._word)  # the child never reads half a word

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:  # an error in the parent: the child leaves
            self._say("stop")
            try:
                self.proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.communicate()
        self._folder.cleanup()
