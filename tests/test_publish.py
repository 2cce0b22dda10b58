"""The published site's copies of the book (``make publish``, run by .github/workflows/pages.yml):
the PDF and a zip of the whole site, both inside the site, where the landing page links them.

The zip is tested on a tiny site (``overrides/zip_site.py``), and the target's recipe through
``make -n`` (what make would run, nothing run): no build and no print of the book here, as the
suite already prints it once (tests/test_print_edition.py).
"""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "overrides") not in sys.path:
    sys.path.insert(0, str(REPO / "overrides"))

import zip_site  # noqa: E402


def _fake_site(root: Path) -> dict[str, bytes]:
    files = {"index.html": b"<h1>home</h1>", "stack/index.html": b"<h1>1</h1>",
             "records/h200/run.json": b'{"x": 1}', "python-to-silicon.pdf": b"%PDF-1.7 " * 100}
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return files


def test_zip_holds_every_file_of_the_site_and_not_itself(tmp_path):
    site = tmp_path / "site"
    files = _fake_site(site)
    out = site / "python-to-silicon-site.zip"
    out.write_bytes(b"an earlier run's zip")  # inside the site, as make publish finds it the second time
    assert zip_site.main([str(site), str(out)]) == 0
    with zipfile.ZipFile(out) as archive:
        names = archive.namelist()
        assert sorted(names) == sorted(f"python-to-silicon-site/{name}" for name in files), names
        assert all(archive.read(f"python-to-silicon-site/{name}") == data for name, data in files.items())
    assert not (site / "python-to-silicon-site.zip.part").exists()
    assert sorted(p.name for p in site.iterdir()) == sorted(["index.html", "stack", "records",
                                                            "python-to-silicon.pdf", out.name])


def test_zip_of_a_missing_or_empty_site_is_one_line(tmp_path, capsys):
    for site in (tmp_path / "nothing", tmp_path / "empty"):
        if site.name == "empty":
            site.mkdir()
        assert zip_site.main([str(site), str(tmp_path / "out.zip")]) == 1
        err = capsys.readouterr().err
        assert err.startswith("zip_site: ") and err.count("\n") == 1 and "Traceback" not in err, err
        assert not (tmp_path / "out.zip").exists()


def test_make_publish_prints_then_zips_into_the_site_the_landing_page_links():
    """`make -n publish`: build, print the PDF into the site, then zip the site (the PDF included)
    into it; the landing page links those two files, and the README names the target."""
    proc = subprocess.run(["make", "-n", "--no-print-directory", "publish", "-o", "setup", "-o", "/usr/bin/chromium",
                           "SITE_URL=https://example.org/book/"], cwd=REPO, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    lines = [shlex.split(line) for line in proc.stdout.splitlines() if line.strip()]
    steps = [next((i for i, words in enumerate(lines) if any(w.endswith(tool) for w in words)), None)
             for tool in ("mkdocs", "print_pdf.py", "zip_site.py")]
    assert None not in steps and steps == sorted(steps), proc.stdout
    build, pdf, archive = (lines[i] for i in steps)
    site = build[build.index("-d") + 1]
    assert "--strict" in build
    pdf_args = pdf[pdf.index("overrides/print_pdf.py") + 1:]
    assert pdf_args[:2] == [site, f"{site}/python-to-silicon.pdf"] and pdf_args[2:] == [
        "--site-url", "https://example.org/book/"], pdf
    assert archive[archive.index("overrides/zip_site.py") + 1:] == [site, f"{site}/python-to-silicon-site.zip"]
    landing = (REPO / "docs" / "index.md").read_text("utf-8")
    for name in ("python-to-silicon.pdf", "python-to-silicon-site.zip"):
        assert f'<a href="{name}">' in landing, f"docs/index.md does not link {name}"
    assert re.search(r"^make publish\b", (REPO / "README.md").read_text("utf-8"), re.M), "README: no make publish"


def test_make_publish_refuses_a_readers_records():
    proc = subprocess.run(["make", "-n", "--no-print-directory", "publish", "RECORDS=lab-out"], cwd=REPO,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode != 0 and "RECORDS" in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert not proc.stdout
