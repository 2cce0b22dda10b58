"""The tests' fork server (``tests/forkserver.py``) serves the commands it can: a worker's later
tests, after the suite's own process has imported or run examples (which set compiler and
communication variables in it), still fork from it instead of starting a fresh interpreter."""
from __future__ import annotations


def test_the_server_serves_later_tests_and_refuses_what_its_imports_read(cli):
    server = cli._server()
    assert server is not None, "the fork server did not start"
    leaked = {"PYTEST_CURRENT_TEST": "a later test", "TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor_x",
              "NCCL_NVLS_ENABLE": "0", "TRITON_DEFAULT_FP_FUSION": "1", "TRITON_INTERPRET": "1",
              "NO_MKDOCS_2_WARNING": "true"}
    env = cli.cpu_env(**leaked)
    differ = sorted(k for k in env.keys() | server.env.keys() if env.get(k) != server.env.get(k))
    assert server.usable_for(env), f"the server is refused a command that differs from it in {differ}"
    assert not server.usable_for(cli.cpu_env(PYTHONPATH="/elsewhere"))  # changes what is imported
    # Read by torch's config while the server imported it: a command that sets it differently runs fresh.
    assert "TORCHINDUCTOR_FORCE_DISABLE_CACHES" in server.read
    assert not server.usable_for(cli.cpu_env(TORCHINDUCTOR_FORCE_DISABLE_CACHES="1"))
