"""The built site as one zip, for reading offline (``make publish`` puts it into the site).

    python overrides/zip_site.py SITE_DIR OUT.zip

Every file under SITE_DIR, under one folder named as OUT without ``.zip`` (unzipping it makes that
folder, not a spray of files). When OUT lies inside SITE_DIR the zip leaves itself out, both the
zip of an earlier run and the one being written (``OUT.part`` until it is complete). Bad input (no
such folder, an empty one) prints one line and exits 1.
"""
from __future__ import annotations

import argparse
import sys
import zipfile
from pathlib import Path


class ZipSiteError(RuntimeError):
    pass


def zip_site(site: Path, out: Path) -> int:
    """Write every file of ``site`` but ``out`` (and ``out``'s partial file) into ``out``; returns
    the number of files. Raises ``ZipSiteError`` for a missing or empty ``site``."""
    if not site.is_dir():
        raise ZipSiteError(f"{site} is not a folder: build the site first (make build)")
    out = out.resolve()
    partial = out.with_name(out.name + ".part")
    files = sorted(p for p in site.resolve().rglob("*") if p.is_file() and p not in (out, partial))
    if not files:
        raise ZipSiteError(f"{site} holds no files")
    top = out.name.removesuffix(".zip")
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as archive:
        for path in files:
            archive.write(path, f"{top}/{path.relative_to(site.resolve()).as_posix()}")
    partial.replace(out)
    return len(files)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site", type=Path, help="the built site (mkdocs build -d SITE)")
    parser.add_argument("out", type=Path, help="the zip to write (inside SITE: it leaves itself out)")
    args = parser.parse_args(argv)
    try:
        count = zip_site(args.site, args.out)
    except (ZipSiteError, OSError) as exc:
        print(f"zip_site: {exc}", file=sys.stderr)
        return 1
    print(f"zip_site: {args.out}: {count} files, {args.out.stat().st_size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
